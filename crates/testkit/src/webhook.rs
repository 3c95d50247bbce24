//! A webhook receiver for tests: an HTTP/1.1 server on a loopback port that records every POST it
//! gets (path, headers, body) and answers with the status the test sets (200 by default; 503 to
//! play a sink that is down). One thread, one connection at a time, `Connection: close`.

use std::io::{self, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One request the receiver got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The request path.
    pub path: String,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
    /// The status it was answered with.
    pub status: u16,
}

impl Received {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Default)]
struct Shared {
    got: Mutex<Vec<Received>>,
    status: AtomicU16,
    stop: AtomicBool,
}

/// A running receiver; stopped on `Drop`.
#[derive(Debug)]
pub struct WebhookReceiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

fn handle(mut s: TcpStream, shared: &Shared) -> io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut r = BufReader::new(s.try_clone()?);
    let Some(crate::process::Request { target: path, headers, body, .. }) = crate::process::read_request(&mut r)?
    else {
        return Ok(());
    };
    let status = match shared.status.load(Ordering::Relaxed) {
        0 => 200,
        s => s,
    };
    if let Ok(mut got) = shared.got.lock() {
        got.push(Received { path, headers, body: String::from_utf8_lossy(&body).into_owned(), status });
    }
    write!(s, "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")?;
    s.flush()
}

impl WebhookReceiver {
    /// Starts a receiver on `127.0.0.1:0`.
    pub fn start() -> io::Result<WebhookReceiver> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new().name("webhook-receiver".into()).spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::Relaxed) {
                    return;
                }
                if let Ok(c) = conn {
                    let _ = handle(c, &s);
                }
            }
        })?;
        Ok(WebhookReceiver { addr, shared, thread: Some(thread) })
    }

    /// `http://127.0.0.1:PORT<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Answers every request from now on with `status`.
    pub fn answer_with(&self, status: u16) {
        self.shared.status.store(status, Ordering::Relaxed);
    }

    /// Every request so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.shared.got.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// Waits until `f` of the requests so far returns `Some`, for at most `timeout`.
    pub fn wait_for<T>(&self, timeout: Duration, mut f: impl FnMut(&[Received]) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = f(&self.received()) {
                return Some(v);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
