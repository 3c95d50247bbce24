//! `GET /v1/decisions`: every decision after a cursor, first from the audit log, then live.
//!
//! A client passes `?after=SEQ` (or, for Server-Sent Events, the `Last-Event-ID` header) and receives
//! every decision with a larger sequence number, in order, exactly once. The stream subscribes to the
//! live feed *before* reading the log, so a decision committed while the catch-up runs is either in
//! the page read or arrives on the feed (and one seen twice is dropped by its seq). A client too slow
//! for the live feed falls back to the log and catches up again; nothing is skipped.
//!
//! Formats: JSON Lines (`{"seq":N,…decision…}` per line, the default) or Server-Sent Events
//! (`id: N`, `event: decision`, `data: {…}`), chosen by `?format=sse|jsonl` or an `Accept:
//! text/event-stream` header. `?follow=false` ends the stream once it has caught up.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use tokio::sync::{broadcast, watch};

use bursar_audit::AuditLog;
use bursar_model::Decision;
use bursar_model::api::{ErrorReply, Sequenced};

use crate::metrics::Metrics;

/// Decisions read from the log per page.
const PAGE: usize = 1000;

/// How often an idle stream sends a keep-alive.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line.
    JsonLines,
    /// Server-Sent Events.
    Sse,
}

/// Everything one stream needs.
pub struct Stream {
    /// Last seq sent.
    pub after: u64,
    /// End once caught up.
    pub follow: bool,
    /// Output format.
    pub format: Format,
    /// The audit database, for catch-up.
    pub audit: PathBuf,
    /// The live feed.
    pub live: broadcast::Receiver<Arc<Sequenced>>,
    /// Becomes true when the server shuts down.
    pub shutdown: watch::Receiver<bool>,
    /// Counters.
    pub metrics: Arc<Metrics>,
}

struct St {
    s: Stream,
    reader: Option<Arc<Mutex<AuditLog>>>,
    catching_up: bool,
    buffer: VecDeque<(u64, String)>,
    done: bool,
    _guard: Guard,
}

struct Guard(Arc<Metrics>);

impl Drop for Guard {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Relaxed);
    }
}

pub(crate) fn frame(format: Format, seq: u64, json_with_seq: &str) -> Bytes {
    // `json_with_seq` is a `Sequenced` serialised by the model: the frame only adds SSE's framing.
    match format {
        Format::JsonLines => Bytes::from(format!("{json_with_seq}\n")),
        Format::Sse => Bytes::from(format!("id: {seq}\nevent: decision\ndata: {json_with_seq}\n\n")),
    }
}

fn keepalive(format: Format) -> Bytes {
    match format {
        Format::JsonLines => Bytes::from_static(b"\n"),
        Format::Sse => Bytes::from_static(b": keep-alive\n\n"),
    }
}

pub(crate) fn error_frame(format: Format, message: &str) -> Bytes {
    let j = serde_json::to_string(&ErrorReply { error: message.to_owned() }).unwrap_or_default();
    match format {
        Format::JsonLines => Bytes::from(format!("{j}\n")),
        Format::Sse => Bytes::from(format!("event: error\ndata: {j}\n\n")),
    }
}

impl St {
    /// Reads the next page from the log into the buffer; returns how many were read.
    async fn page(&mut self) -> Result<usize, String> {
        let reader = match &self.reader {
            Some(r) => r.clone(),
            None => {
                let path = self.s.audit.clone();
                let store = tokio::task::spawn_blocking(move || AuditLog::open_read(&path))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())?;
                let r = Arc::new(Mutex::new(store));
                self.reader = Some(r.clone());
                r
            }
        };
        let after = self.s.after;
        let rows = tokio::task::spawn_blocking(move || {
            let after = i64::try_from(after).unwrap_or(i64::MAX);
            reader
                .lock()
                .map_err(|_| "audit reader poisoned".to_owned())?
                .decisions_since(after, PAGE)
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())??;
        let n = rows.len();
        for row in rows {
            let seq = u64::try_from(row.seq).unwrap_or(0);
            let decision: Decision =
                row.to_decision().map_err(|e| format!("decision {seq} in the audit log is unreadable: {e}"))?;
            self.buffer.push_back((seq, Sequenced { seq, decision }.to_json()));
        }
        Ok(n)
    }

    async fn next(&mut self) -> Option<Bytes> {
        loop {
            if self.done {
                return None;
            }
            if let Some((seq, line)) = self.buffer.pop_front() {
                if seq <= self.s.after {
                    continue;
                }
                self.s.after = seq;
                return Some(frame(self.s.format, seq, &line));
            }
            if *self.s.shutdown.borrow() {
                return None;
            }
            if self.catching_up {
                match self.page().await {
                    Ok(0) => {
                        self.catching_up = false;
                        if !self.s.follow {
                            return None;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        self.done = true;
                        return Some(error_frame(self.s.format, &format!("cannot read the audit log: {e}")));
                    }
                }
                continue;
            }
            tokio::select! {
                item = self.s.live.recv() => match item {
                    Ok(d) => {
                        if d.seq > self.s.after {
                            self.buffer.push_back((d.seq, d.to_json()));
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => self.catching_up = true,
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = self.s.shutdown.changed() => return None,
                _ = tokio::time::sleep(KEEPALIVE) => return Some(keepalive(self.s.format)),
            }
        }
    }
}

/// The response body of a decision stream.
pub fn body(s: Stream) -> Body {
    s.metrics.streams.fetch_add(1, Ordering::Relaxed);
    let st = St {
        _guard: Guard(s.metrics.clone()),
        s,
        reader: None,
        catching_up: true,
        buffer: VecDeque::new(),
        done: false,
    };
    let stream =
        futures_util::stream::unfold(
            st,
            |mut st| async move { st.next().await.map(|b| (Ok::<Bytes, Infallible>(b), st)) },
        );
    Body::from_stream(stream)
}
