//! Talking to `bursar serve`: posting events (`POST /v1/events`) and following decisions
//! (`GET /v1/decisions?after=SEQ&format=jsonl`), over loopback HTTP/1.1 with serve's own small client.

use std::net::SocketAddr;
use std::time::Duration;

use bursar_serve::client::{Conn, LineStream};
use serde_json::Value;

use crate::{Error, Result};

/// Where serve listens, and its token.
#[derive(Debug, Clone)]
pub struct Server {
    /// Address, e.g. `127.0.0.1:7878`.
    pub addr: SocketAddr,
    /// Bearer token (serve `--token`), if set.
    pub token: Option<String>,
}

/// serve's answer to `POST /v1/events`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posted {
    /// Events applied now.
    pub accepted: u64,
    /// Events whose id serve had already seen (a resend).
    pub duplicates: u64,
}

impl Server {
    fn err(&self, message: impl Into<String>) -> Error {
        Error::Server { addr: self.addr.to_string(), message: message.into() }
    }

    /// Posts events as JSON Lines. Fails if serve is unreachable, answers an error, or rejected any
    /// line (a rejected line is a bug in the agent, never something to drop quietly).
    pub fn post(&self, events: &[Value]) -> Result<Posted> {
        if events.is_empty() {
            return Ok(Posted { accepted: 0, duplicates: 0 });
        }
        let mut body = String::new();
        for e in events {
            body.push_str(&e.to_string());
            body.push('\n');
        }
        let mut conn = Conn::connect(self.addr, self.token.as_deref()).map_err(|e| self.err(e.to_string()))?;
        let r = conn
            .request_with("POST", "/v1/events", body.as_bytes(), &[("content-type", "application/x-ndjson")])
            .map_err(|e| self.err(e.to_string()))?;
        let v: Value = r.json().map_err(|e| self.err(format!("HTTP {}: {e}", r.status)))?;
        if r.status != 200 {
            return Err(self.err(format!("HTTP {}: {v}", r.status)));
        }
        if let Some(rejected) = v.get("rejected").and_then(Value::as_array).filter(|a| !a.is_empty()) {
            return Err(self.err(format!("serve rejected events: {}", Value::Array(rejected.clone()))));
        }
        let count = |k: &str| match v.get(k) {
            Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
            Some(Value::Array(a)) => a.len() as u64,
            _ => 0,
        };
        Ok(Posted { accepted: count("accepted"), duplicates: count("duplicates") })
    }

    /// Opens the decision stream after `after`; `follow` keeps it open for live decisions.
    pub fn decisions(&self, after: u64, follow: bool) -> Result<Decisions> {
        let conn = Conn::connect(self.addr, self.token.as_deref()).map_err(|e| self.err(e.to_string()))?;
        let path = format!("/v1/decisions?after={after}&format=jsonl&follow={follow}");
        let stream = conn.stream(&path, &[]).map_err(|e| self.err(e.to_string()))?;
        if stream.status != 200 {
            return Err(self.err(format!("GET {path}: HTTP {}", stream.status)));
        }
        // serve sends a keep-alive at least every 15 s; twice that without a byte means a dead peer.
        stream.set_read_timeout(Some(Duration::from_secs(45))).map_err(|e| self.err(e.to_string()))?;
        Ok(Decisions { stream, server: self.clone() })
    }
}

/// A stream of decisions, each a JSON object with its `seq`.
#[derive(Debug)]
pub struct Decisions {
    stream: LineStream,
    server: Server,
}

impl Decisions {
    /// The next decision; `None` when the stream ended (serve stopped, or caught up without `follow`).
    pub fn next_decision(&mut self) -> Result<Option<Value>> {
        loop {
            let line = self.stream.next_line().map_err(|e| self.server.err(format!("decision stream: {e}")))?;
            let Some(line) = line else { return Ok(None) };
            let line = line.trim();
            if !line.starts_with('{') {
                continue; // keep-alive
            }
            let v: Value = serde_json::from_str(line)
                .map_err(|e| self.server.err(format!("a decision that is not JSON ({e}): {line}")))?;
            if v.get("seq").and_then(Value::as_u64).is_none() {
                return Err(self.server.err(format!("a decision without `seq`: {line}")));
            }
            return Ok(Some(v));
        }
    }
}
