//! serve's accept loop over TLS, with real handshakes: a router that echoes the request extensions
//! the loop sets, served by `listen::serve` on loopback, asked by `bursar-http` with and without a
//! client certificate. Certificates are made here (testkit's `TestCa`).
//!
//! Pins: with `--tls-require-client-cert` a client without a certificate is refused at the
//! handshake and one with a certificate of the client CA reaches the route with its subject (the
//! RFC 4514 DN, the CN, the SAN DNS names) and its address as extensions; with an optional client
//! CA a client without one gets through with no `PeerCert`; a client certificate of another CA is
//! refused; a connection that never finishes its handshake is cut at the header deadline and
//! counted; the connection cap still answers 503, over TLS, with at most `REFUSING_AT_ONCE` such
//! refusals under way (a flood beyond them is closed unanswered and counted as shed); a key that does not fit its
//! certificate is refused at load with the flag's name.

#![expect(clippy::unwrap_used, reason = "integration tests: a failed step fails the test")]

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::routing::get;
use bursar_http::{Client, ClientConfig, Identity};
use bursar_serve::listen::{self, Limits, ListenCounters, PeerCert, Tls, TlsConfig};
use bursar_testkit::TempDir;
use bursar_testkit::tls::TestCa;
use tokio::sync::watch;

struct Served {
    addr: SocketAddr,
    counters: Arc<ListenCounters>,
    _stop: watch::Sender<bool>,
    _rt: tokio::runtime::Runtime,
}

async fn who(req: Request) -> String {
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip().to_string()).unwrap_or_default();
    match req.extensions().get::<PeerCert>() {
        Some(c) => {
            format!("{peer}|{}|{}|{}", c.subject, c.common_name.clone().unwrap_or_default(), c.dns_names.join(" "))
        }
        None => format!("{peer}|none"),
    }
}

fn serve(tls: &TlsConfig, max_connections: usize) -> Served {
    serve_with(tls, max_connections, Duration::from_millis(500))
}

fn serve_with(tls: &TlsConfig, max_connections: usize, header_timeout: Duration) -> Served {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let tls = Tls::load(tls).unwrap();
    // Every client here is 127.0.0.1: one address may use the whole listener.
    let limits = Limits {
        max_connections,
        max_per_address: max_connections,
        max_unfinished_per_address: max_connections,
        header_timeout,
        body_timeout: Duration::from_secs(5),
        max_body: 1024,
    };
    let counters = Arc::new(ListenCounters::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().route("/who", get(who));
    rt.spawn(listen::serve(listener, app, limits, counters.clone(), Some(tls), stop_rx));
    Served { addr, counters, _stop: stop_tx, _rt: rt }
}

struct Pki {
    dir: TempDir,
    ca: TestCa,
    ca_file: PathBuf,
    tls: TlsConfig,
}

fn pki(name: &str, client_ca: bool, require: bool) -> Pki {
    let dir = TempDir::new(name).unwrap();
    let ca = TestCa::new("bursar test CA").unwrap();
    let ca_file = ca.write(&dir, "ca").unwrap();
    let (cert_file, key_file) = ca.server().unwrap().write(&dir, "server").unwrap();
    let tls =
        TlsConfig { cert_file, key_file, client_ca: client_ca.then(|| ca_file.clone()), require_client_cert: require };
    Pki { dir, ca, ca_file, tls }
}

fn client(p: &Pki, addr: SocketAddr, identity: Option<Identity>) -> Client {
    Client::new(ClientConfig {
        ca_file: Some(p.ca_file.clone()),
        identity,
        timeout: Some(Duration::from_secs(5)),
        ..ClientConfig::new(format!("https://{addr}"))
    })
    .unwrap()
}

#[test]
fn a_required_client_certificate_is_checked_at_the_handshake_and_its_subject_reaches_the_request() {
    let p = pki("tls-listen-required", true, true);
    let s = serve(&p.tls, 16);
    let e = client(&p, s.addr, None).get("/who").unwrap_err();
    assert!(!matches!(e, bursar_http::Error::Status { .. }), "refused before any HTTP: {e}");
    let text = e.to_string();
    assert!(text.contains("client certificate"), "{text}");

    let (cert_file, key_file) = p.ca.client("alice", "lab", &["alice.lab"]).unwrap().write(&p.dir, "alice").unwrap();
    let alice = client(&p, s.addr, Some(Identity { cert_file, key_file }));
    let r = alice.get("/who").unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "127.0.0.1|O=lab,CN=alice|alice|alice.lab"));

    // A certificate of another CA is refused too.
    let other = TestCa::new("another CA").unwrap();
    let (cert_file, key_file) = other.client("mallory", "lab", &[]).unwrap().write(&p.dir, "mallory").unwrap();
    let e = client(&p, s.addr, Some(Identity { cert_file, key_file })).get("/who").unwrap_err().to_string();
    assert!(e.contains("does not accept the client certificate"), "{e}");
    assert!(s.counters.tls_failed.load(Ordering::Relaxed) >= 2);
}

#[test]
fn an_optional_client_ca_lets_a_client_without_a_certificate_in() {
    let p = pki("tls-listen-optional", true, false);
    let s = serve(&p.tls, 16);
    assert_eq!(client(&p, s.addr, None).get("/who").unwrap().text(), "127.0.0.1|none");
    let (cert_file, key_file) = p.ca.client("slurm-agent", "ops", &[]).unwrap().write(&p.dir, "agent").unwrap();
    let r = client(&p, s.addr, Some(Identity { cert_file, key_file })).get("/who").unwrap();
    assert_eq!(r.text(), "127.0.0.1|O=ops,CN=slurm-agent|slurm-agent|");
}

#[test]
fn the_handshake_is_under_the_header_deadline_and_the_cap_answers_over_tls() {
    let p = pki("tls-listen-limits", false, false);
    let s = serve(&p.tls, 1);
    // A connection that sends nothing is cut at the header deadline (500 ms), not held.
    let mut idle = TcpStream::connect(s.addr).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let started = Instant::now();
    let mut buf = Vec::new();
    let _ = idle.read_to_end(&mut buf);
    assert!(started.elapsed() < Duration::from_secs(5), "cut after {:?}", started.elapsed());
    // The connection task counts the failed handshake as it ends, which may be just after the client
    // saw the connection close: wait for it (a loaded machine takes its time).
    let counted = Instant::now();
    while s.counters.tls_failed.load(Ordering::Relaxed) == 0 && counted.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(s.counters.tls_failed.load(Ordering::Relaxed), 1);

    // With the one slot held by an idle connection, the next is answered 503 over TLS.
    let _held = TcpStream::connect(s.addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let r = client(&p, s.addr, None).get("/who").unwrap();
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("too many open connections"));
    assert_eq!(s.counters.refused.load(Ordering::Relaxed), 1);
}

#[test]
fn a_flood_over_the_cap_is_shed_beyond_the_refusals_under_way() {
    let p = pki("tls-listen-flood", false, false);
    // A long header deadline: the one slot stays held by a connection that never says hello.
    let s = serve_with(&p.tls, 1, Duration::from_secs(30));
    let holder = TcpStream::connect(s.addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // Each connection over the cap that says nothing holds its refusal for up to a second (the
    // handshake of the 503); beyond `REFUSING_AT_ONCE` of them, the rest are closed at once.
    let n = listen::REFUSING_AT_ONCE + 40;
    let flood: Vec<TcpStream> = (0..n).map(|_| TcpStream::connect(s.addr).unwrap()).collect();
    let counted = Instant::now();
    let total = || s.counters.refused.load(Ordering::Relaxed) + s.counters.shed.load(Ordering::Relaxed);
    while total() < n as u64 && counted.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let (refused, shed) = (s.counters.refused.load(Ordering::Relaxed), s.counters.shed.load(Ordering::Relaxed));
    assert_eq!(refused + shed, n as u64, "every connection over the cap is refused or shed");
    assert!(shed > 0, "a flood beyond the refusals under way is shed: {refused} refused, {shed} shed");
    // A shed connection is closed, not held.
    let mut last = flood.last().unwrap().try_clone().unwrap();
    last.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = Vec::new();
    assert!(matches!(last.read_to_end(&mut buf), Ok(0) | Err(_)), "{buf:?}");
    // With the flood and the holder gone, the listener serves again.
    drop(flood);
    drop(holder);
    let c = client(&p, s.addr, None);
    let again = Instant::now();
    loop {
        if c.get("/who").is_ok_and(|r| r.status == 200) {
            break;
        }
        assert!(again.elapsed() < Duration::from_secs(10), "the listener did not serve again");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_key_that_does_not_fit_is_refused_at_load() {
    let p = pki("tls-listen-bad", false, false);
    let (_, other_key) = p.ca.server().unwrap().write(&p.dir, "other").unwrap();
    let e = Tls::load(&TlsConfig { key_file: other_key, ..p.tls.clone() }).unwrap_err().to_string();
    assert!(e.contains("--tls-key") && e.contains("does not fit"), "{e}");
    let e = Tls::load(&TlsConfig { require_client_cert: true, ..p.tls }).unwrap_err().to_string();
    assert!(e.contains("--tls-client-ca"), "{e}");
}
