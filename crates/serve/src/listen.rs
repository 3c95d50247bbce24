//! Serving HTTP on a listener with the limits a server on the scheduler's path needs, which a plain
//! `axum::serve` does not set: a cap on open connections, a deadline for a request's head (which hyper
//! also applies to an idle keep-alive connection waiting for its next request), a deadline and a size
//! limit for its body, and a 413 before a declared oversize body is read.
//!
//! Before these, 1,100 idle loopback connections exhausted a 1,024 descriptor limit and no admission
//! could be answered; a half-sent request or a sender of one byte a second held a connection forever.
//! Now a connection beyond the cap is answered `503` at once and closed, an idle or slow one is closed
//! after its deadline, and `--admit-listen` gives the scheduler's hook a listener of its own (only
//! `/v1/admit` and `/healthz`) with its own connection budget, so event producers and streams can
//! never crowd admissions out.
//!
//! The accept loop mirrors `axum::serve`'s (hyper-util's connection builder over the router as a
//! service, a graceful shutdown that lets in-flight requests finish).
//!
//! TLS ([`tls`]: `--tls-cert`, `--tls-key`, optionally `--tls-client-ca` and
//! `--tls-require-client-cert`) is terminated here, under the same limits: a connection counts
//! against the cap from its accept, its handshake must finish within the header deadline (a client
//! that opens a connection and sends nothing, or half a hello, is cut like an idle one), and one over
//! the cap is answered 503 over TLS after a handshake of at most a second (at most
//! [`REFUSING_AT_ONCE`] such refusals at once; beyond them a connection is closed unanswered). Every request carries the
//! peer's address (axum's `ConnectInfo<SocketAddr>`) and, with a client CA, the verified client
//! certificate's subject ([`PeerCert`]) as request extensions.

mod tls;

pub use tls::{PeerCert, Tls, TlsConfig, TlsError};

use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bursar_model::api::ErrorReply;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

/// The limits of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Open connections at most; one more is answered 503 and closed.
    pub max_connections: usize,
    /// Time for a request's head to arrive, and for an idle keep-alive connection to send its next one.
    pub header_timeout: Duration,
    /// Time for a request's body to arrive once its head has.
    pub body_timeout: Duration,
    /// Largest body in bytes.
    pub max_body: usize,
}

/// Connections refused and cut, for `/metrics`.
#[derive(Debug, Default)]
pub struct ListenCounters {
    /// Connections answered 503 at once because the listener was at its cap.
    pub refused: AtomicU64,
    /// Requests whose body did not arrive in time.
    pub body_timeouts: AtomicU64,
    /// Requests refused for a declared or actual body over the limit.
    pub too_large: AtomicU64,
    /// TLS handshakes that failed or did not finish within the header deadline.
    pub tls_failed: AtomicU64,
    /// Connections over the cap closed without a 503, because [`REFUSING_AT_ONCE`] refusals were
    /// already under way (a flood: each refusal over TLS holds a descriptor for its handshake).
    pub shed: AtomicU64,
}

/// Refusals (503s, over TLS after a handshake of at most a second) under way at once; a connection
/// over the cap beyond these is closed at once, so a flood of connections cannot hold more than the
/// cap plus these descriptors.
pub const REFUSING_AT_ONCE: usize = 64;

fn error(status: StatusCode, message: String) -> Response {
    let body = serde_json::to_string(&ErrorReply { error: message }).unwrap_or_default();
    let mut r = (status, body).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    r
}

/// Middleware: refuses a declared oversize body before reading it, and reads the body under a
/// deadline and the size limit, so a slow or endless sender holds nothing for long.
pub async fn body_limits(
    State((limits, counters)): State<(Limits, Arc<ListenCounters>)>,
    req: Request,
    next: Next,
) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_body as u64) {
        counters.too_large.fetch_add(1, Ordering::Relaxed);
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the body declares {} bytes, over the limit of {} (`--max-body`); split it into several requests",
                declared.unwrap_or(0),
                limits.max_body
            ),
        );
    }
    let (parts, body) = req.into_parts();
    match tokio::time::timeout(limits.body_timeout, axum::body::to_bytes(body, limits.max_body)).await {
        Err(_) => {
            counters.body_timeouts.fetch_add(1, Ordering::Relaxed);
            let mut r = error(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request body did not arrive within {:?}", limits.body_timeout),
            );
            r.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
            r
        }
        Ok(Err(e)) => {
            counters.too_large.fetch_add(1, Ordering::Relaxed);
            error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body could not be read within the limit of {} bytes: {e}", limits.max_body),
            )
        }
        Ok(Ok(bytes)) => next.run(Request::from_parts(parts, Body::from(bytes))).await,
    }
}

/// The 503 a connection over the cap gets.
async fn refuse<S: AsyncWrite + Unpin>(mut stream: S) {
    let body = serde_json::to_string(&ErrorReply {
        error: "too many open connections; retry shortly (the scheduler's hook should use --admit-listen)".into(),
    })
    .unwrap_or_default();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Serves one connection (plain or TLS) until it ends or, at shutdown, its request in flight ends.
/// Every request carries `peer` and the client certificate's subject as extensions.
async fn connection<I>(
    io: I,
    app: Router,
    peer: SocketAddr,
    cert: Option<PeerCert>,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = app.map_request(move |req: Request<Incoming>| {
        let mut req = req.map(Body::new);
        req.extensions_mut().insert(ConnectInfo(peer));
        if let Some(c) = &cert {
            req.extensions_mut().insert(c.clone());
        }
        req
    });
    let service = TowerToHyperService::new(service);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout).keep_alive(true);
    let mut conn = pin!(builder.serve_connection(TokioIo::new(io), service));
    let stopping = async {
        let _ = stop.wait_for(|s| *s).await.map(|_| ());
    };
    let ended = tokio::select! {
        r = conn.as_mut() => r,
        () = stopping => {
            // Shutting down: finish the request in flight, take no other.
            conn.as_mut().graceful_shutdown();
            conn.as_mut().await
        }
    };
    if let Err(e) = ended {
        tracing::trace!(error = %e, "connection ended");
    }
}

/// Serves `app` on `listener` under `limits` (over TLS when `tls` is set) until `shutdown` turns
/// true, then lets the requests in flight finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    counters: Arc<ListenCounters>,
    tls: Option<Tls>,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let refusing = Arc::new(Semaphore::new(REFUSING_AT_ONCE));
    // Dropped by every connection task when it ends: `closed()` on the sender waits for all of them.
    let (done_tx, done_rx) = watch::channel(());
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.changed() => break,
        };
        let (stream, peer) = match accepted {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors or a reset before accept: wait a little rather than spin.
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            let Ok(refusal) = refusing.clone().try_acquire_owned() else {
                counters.shed.fetch_add(1, Ordering::Relaxed);
                drop(stream);
                continue;
            };
            counters.refused.fetch_add(1, Ordering::Relaxed);
            let tls = tls.clone();
            tokio::spawn(async move {
                let _refusal = refusal;
                let _ = tokio::time::timeout(Duration::from_secs(1), async move {
                    match tls {
                        None => refuse(stream).await,
                        Some(t) => {
                            if let Ok(s) = t.acceptor.accept(stream).await {
                                refuse(s).await;
                            }
                        }
                    }
                })
                .await;
            });
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let stop = shutdown.clone();
        let done = done_rx.clone();
        let tls = tls.clone();
        let counters = counters.clone();
        tokio::spawn(async move {
            match tls {
                None => connection(stream, app, peer, None, limits, stop).await,
                Some(t) => match tokio::time::timeout(limits.header_timeout, t.acceptor.accept(stream)).await {
                    Ok(Ok(s)) => {
                        let cert =
                            s.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(PeerCert::from_der);
                        connection(s, app, peer, cert, limits, stop).await;
                    }
                    Ok(Err(e)) => {
                        counters.tls_failed.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    }
                    Err(_) => {
                        counters.tls_failed.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(%peer, "TLS handshake not done within the header deadline");
                    }
                },
            }
            drop(permit);
            drop(done);
        });
    }
    drop(listener);
    drop(done_rx);
    done_tx.closed().await;
}
