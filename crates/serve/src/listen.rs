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
//! One address cannot take a listener for itself: it may hold at most `max_per_address` open
//! connections and `max_unfinished_per_address` unfinished ones (accepted and not yet through its
//! first request head, or partway through a later one; an idle keep-alive connection is only
//! open), so 520 half-open requests from one address, reopened
//! as they are cut, no longer leave admissions from every other address unanswered: a connection
//! over either is answered 503 at once and counted (`reason="address"` or `"unfinished"`). Both
//! limits hold on every listener, `--admit-listen`'s too.
//!
//! Bodies are not read here: [`declared_limit`] refuses a declared oversize body before anything is
//! read, and [`read_body`] reads one (under the deadline and the size limit) only for a request that
//! was authenticated and may use its route ([`crate::auth`]), so a request that fails is answered
//! without its body ever being buffered.
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

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
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
    /// Open connections from one address at most.
    pub max_per_address: usize,
    /// Connections from one address whose request head is not complete yet (just accepted, or
    /// partway through a later head), at most.
    pub max_unfinished_per_address: usize,
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
    /// Connections answered 503 because their address held `max_per_address` already.
    pub address: AtomicU64,
    /// Connections answered 503 because their address held `max_unfinished_per_address`
    /// unfinished ones already.
    pub unfinished: AtomicU64,
    /// State-changing requests refused as cross-site ([`crate::csrf`]).
    pub cross_site: AtomicU64,
}

/// Open and unfinished connections per address, on one listener.
#[derive(Debug, Default)]
struct PerAddress {
    table: Mutex<HashMap<IpAddr, (usize, usize)>>,
}

/// Why a connection from an address is refused.
enum OverAddress {
    Open,
    Unfinished,
}

impl PerAddress {
    /// Counts a new connection from `ip` (open and unfinished), or says which limit it is over.
    fn admit(&self, ip: IpAddr, limits: &Limits) -> Result<(), OverAddress> {
        let Ok(mut t) = self.table.lock() else { return Ok(()) };
        let e = t.entry(ip).or_insert((0, 0));
        if e.0 >= limits.max_per_address.max(1) {
            return Err(OverAddress::Open);
        }
        if e.1 >= limits.max_unfinished_per_address.max(1) {
            return Err(OverAddress::Unfinished);
        }
        e.0 += 1;
        e.1 += 1;
        Ok(())
    }

    fn unfinished(&self, ip: IpAddr, up: bool) {
        if let Ok(mut t) = self.table.lock()
            && let Some(e) = t.get_mut(&ip)
        {
            e.1 = if up { e.1 + 1 } else { e.1.saturating_sub(1) };
        }
    }

    fn close(&self, ip: IpAddr, unfinished: bool) {
        if let Ok(mut t) = self.table.lock()
            && let Some(e) = t.get_mut(&ip)
        {
            e.0 = e.0.saturating_sub(1);
            if unfinished {
                e.1 = e.1.saturating_sub(1);
            }
            if e.0 == 0 {
                t.remove(&ip);
            }
        }
    }
}

/// One connection's place in its address's counts: unfinished from its accept until its first
/// request head is complete, and again from the first byte of each later head until it is complete.
/// An idle keep-alive connection (nothing sent since its last answer) counts as open, not unfinished.
struct Tracked {
    ip: IpAddr,
    table: Arc<PerAddress>,
    /// Counted as unfinished now.
    unfinished: AtomicBool,
    /// Between a request's head and the end of its answer (bytes then are its body).
    in_request: AtomicBool,
}

impl Tracked {
    fn new(ip: IpAddr, table: Arc<PerAddress>) -> Tracked {
        Tracked { ip, table, unfinished: AtomicBool::new(true), in_request: AtomicBool::new(false) }
    }

    /// Bytes arrived: outside a request, they start the next head.
    fn bytes(&self) {
        if !self.in_request.load(Ordering::Acquire) && !self.unfinished.swap(true, Ordering::AcqRel) {
            self.table.unfinished(self.ip, true);
        }
    }

    /// A request head arrived.
    fn started(&self) {
        self.in_request.store(true, Ordering::Release);
        if self.unfinished.swap(false, Ordering::AcqRel) {
            self.table.unfinished(self.ip, false);
        }
    }

    /// The answer is over: the connection waits for the next head.
    fn answered(&self) {
        self.in_request.store(false, Ordering::Release);
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.table.close(self.ip, self.unfinished.load(Ordering::Acquire));
    }
}

/// A connection's stream, telling its [`Tracked`] when bytes arrive.
struct Watched<I> {
    inner: I,
    conn: Arc<Tracked>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.bytes();
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A response body that tells its connection's [`Tracked`] when the answer is over (sent, or
/// dropped with the connection).
struct AnswerBody {
    inner: Body,
    conn: Option<Arc<Tracked>>,
}

impl hyper::body::Body for AnswerBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled
            && let Some(c) = self.conn.take()
        {
            c.answered();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for AnswerBody {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            c.answered();
        }
    }
}

/// Refusals (503s, over TLS after a handshake of at most a second) under way at once; a connection
/// over the cap beyond these is closed at once, so a flood of connections cannot hold more than the
/// cap plus these descriptors.
pub const REFUSING_AT_ONCE: usize = 64;

/// The 503 a connection over the cap (or over its address's share) gets.
async fn refuse<S: AsyncWrite + Unpin>(mut stream: S, why: &str) {
    let body = serde_json::to_string(&ErrorReply { error: why.to_owned() }).unwrap_or_default();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Serves one connection (plain or TLS) until it ends or, at shutdown, its request in flight ends.
/// Every request carries `peer` and the client certificate's subject as extensions.
async fn connection<I>(io: I, cert: Option<PeerCert>, a: Accepted)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Accepted { app, peer, limits, tracked, mut stop, .. } = a;
    let on_request = tracked.clone();
    let watched = tracked.clone();
    let service = app
        .map_request(move |req: Request<Incoming>| {
            on_request.started();
            let mut req = req.map(Body::new);
            req.extensions_mut().insert(ConnectInfo(peer));
            if let Some(c) = &cert {
                req.extensions_mut().insert(c.clone());
            }
            req
        })
        .map_response(move |res: Response| {
            res.map(|inner| Body::new(AnswerBody { inner, conn: Some(tracked.clone()) }))
        });
    let service = TowerToHyperService::new(service);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout).keep_alive(true);
    let io = Watched { inner: io, conn: watched };
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
    let per_address = Arc::new(PerAddress::default());
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
        let over = match slots.clone().try_acquire_owned() {
            Err(_) => Err((
                &counters.refused,
                "too many open connections; retry shortly (the scheduler's hook should use --admit-listen)".to_owned(),
                None,
            )),
            Ok(permit) => match per_address.admit(peer.ip(), &limits) {
                Ok(()) => Ok(permit),
                Err(OverAddress::Open) => Err((
                    &counters.address,
                    format!(
                        "too many open connections from {} (at most {} per address); close some, or retry shortly",
                        peer.ip(),
                        limits.max_per_address
                    ),
                    Some(permit),
                )),
                Err(OverAddress::Unfinished) => Err((
                    &counters.unfinished,
                    format!(
                        "too many unfinished requests from {} (at most {} per address whose head has not arrived); retry shortly",
                        peer.ip(),
                        limits.max_unfinished_per_address
                    ),
                    Some(permit),
                )),
            },
        };
        let over = match over {
            Ok(permit) => {
                let tracked = Arc::new(Tracked::new(peer.ip(), per_address.clone()));
                let _ = stream.set_nodelay(true);
                let accepted = Accepted {
                    app: app.clone(),
                    peer,
                    limits,
                    tracked,
                    counters: counters.clone(),
                    stop: shutdown.clone(),
                };
                let done = done_rx.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    serve_one(stream, tls, accepted).await;
                    drop(permit);
                    drop(done);
                });
                continue;
            }
            Err(over) => over,
        };
        let (counter, why, permit) = over;
        // The slot a refusal took back is free for others at once.
        drop(permit);
        let Ok(refusal) = refusing.clone().try_acquire_owned() else {
            counters.shed.fetch_add(1, Ordering::Relaxed);
            drop(stream);
            continue;
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let tls = tls.clone();
        tokio::spawn(async move {
            let _refusal = refusal;
            let _ = tokio::time::timeout(Duration::from_secs(1), async move {
                match tls {
                    None => refuse(stream, &why).await,
                    Some(t) => {
                        if let Ok(s) = t.acceptor.accept(stream).await {
                            refuse(s, &why).await;
                        }
                    }
                }
            })
            .await;
        });
    }
    drop(listener);
    drop(done_rx);
    if tokio::time::timeout(DRAIN_LIMIT, done_tx.closed()).await.is_err() {
        tracing::warn!("requests still in flight {DRAIN_LIMIT:?} after the stop: not waiting for them");
    }
}

/// How long a stopping listener waits for the requests in flight (a decision stream ends at once; an
/// admission waits at most for its commit, and answers 503 when the audit log cannot commit).
pub const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// An accepted connection and what serving it needs.
struct Accepted {
    app: Router,
    peer: SocketAddr,
    limits: Limits,
    tracked: Arc<Tracked>,
    counters: Arc<ListenCounters>,
    stop: watch::Receiver<bool>,
}

/// Serves one accepted connection: its TLS handshake (within the header deadline) if any, then
/// its requests.
async fn serve_one(stream: tokio::net::TcpStream, tls: Option<Tls>, a: Accepted) {
    let (peer, counters) = (a.peer, a.counters.clone());
    match tls {
        None => connection(stream, None, a).await,
        Some(t) => match tokio::time::timeout(a.limits.header_timeout, t.acceptor.accept(stream)).await {
            Ok(Ok(s)) => {
                let cert = s.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(PeerCert::from_der);
                connection(s, cert, a).await;
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
}
