//! The client against real sockets: an https receiver on a CA made here (testkit's `TlsWebhook`),
//! and a plain HTTP/1.1 server in this file that answers with a chunked stream and counts its
//! connections.
//!
//! Pins: https with `ca_file` works and carries the basic credential; a server certificate the CA
//! file does not sign, an https URL to a plain server and a key that does not fit its certificate
//! each give an error that says what to do (never a panic); a streamed answer is read line by line
//! as it arrives; consecutive requests reuse one connection; no secret shows in `Debug`.

#![expect(clippy::unwrap_used, reason = "integration tests: a failed step fails the test")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bursar_http::{Auth, Client, ClientConfig, Error, Identity, Request, Secret};
use bursar_testkit::TempDir;
use bursar_testkit::tls::{TestCa, TlsWebhook};

fn basic() -> Auth {
    Auth::Basic { username: "bursar".into(), password: Secret::new("pw-1") }
}

#[test]
fn https_with_a_ca_file_carries_the_credential() {
    let dir = TempDir::new("http-ca").unwrap();
    let ca = TestCa::new("bursar test CA").unwrap();
    let hook = TlsWebhook::start(&ca.server().unwrap()).unwrap();
    let cfg = ClientConfig {
        ca_file: Some(ca.write(&dir, "ca").unwrap()),
        auth: basic(),
        ..ClientConfig::new(hook.url("/hook?team=a"))
    };
    let client = Client::new(cfg).unwrap();
    let r = client.post_json("", &serde_json::json!({"n": 1})).unwrap();
    assert_eq!(r.status, 200);
    let got = hook.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].path, "/hook?team=a");
    assert_eq!(got[0].header("authorization"), Some("Basic YnVyc2FyOnB3LTE="));
    assert_eq!(got[0].body, r#"{"n":1}"#);
    // The receiver's status comes back as an error naming the URL, with a help line for a 401.
    hook.answer_with(401);
    let e = client.post_json("", &1).unwrap_err().to_string();
    assert!(e.contains("answered HTTP 401") && e.contains("check `basic_auth`"), "{e}");
}

#[test]
fn a_certificate_the_ca_file_does_not_sign_names_the_setting() {
    let dir = TempDir::new("http-unknown-ca").unwrap();
    let (ca, other) = (TestCa::new("server CA").unwrap(), TestCa::new("some other CA").unwrap());
    let hook = TlsWebhook::start(&ca.server().unwrap()).unwrap();
    let other_file = other.write(&dir, "other").unwrap();
    let cfg = ClientConfig { ca_file: Some(other_file.clone()), ..ClientConfig::new(hook.url("")) };
    let e = Client::new(cfg).unwrap().get("/").unwrap_err();
    assert!(matches!(e, Error::Certificate { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains(&hook.url("/")) && text.contains("not signed by a trusted CA"), "{text}");
    assert!(text.contains(&format!("the CA file `{}` (`ca_file`) does not sign it", other_file.display())), "{text}");
    // Without a CA file the system's roots are used: no help about a file that is not set.
    let e = Client::new(ClientConfig::new(hook.url(""))).unwrap().get("/").unwrap_err().to_string();
    assert!(e.contains("no CA of the system's store signs it"), "{e}");
    assert!(hook.received().is_empty());
}

#[test]
fn https_to_a_plain_server_and_bad_files_are_errors_not_panics() {
    let dir = TempDir::new("http-bad").unwrap();
    // A plain HTTP server that answers a TLS hello with an HTTP error, as Go's servers do.
    let plain = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("https://{}", plain.local_addr().unwrap());
    std::thread::spawn(move || {
        let (mut s, _) = plain.accept().unwrap();
        let _ = s.write_all(b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n");
        std::thread::sleep(Duration::from_millis(500));
    });
    let e = Client::new(ClientConfig::new(url)).unwrap().get("/").unwrap_err().to_string();
    assert!(e.contains("did not answer in TLS") && e.contains("`http://`"), "{e}");

    let ca = TestCa::new("ca").unwrap();
    let (cert, _) = ca.client("alice", "lab", &[]).unwrap().write(&dir, "alice").unwrap();
    let (_, wrong_key) = ca.client("bob", "lab", &[]).unwrap().write(&dir, "bob").unwrap();
    let cfg = ClientConfig {
        identity: Some(Identity { cert_file: cert, key_file: wrong_key }),
        ..ClientConfig::new("https://127.0.0.1:1")
    };
    let e = Client::new(cfg).unwrap_err().to_string();
    assert!(e.contains("the key does not fit the certificate") && e.contains("help:"), "{e}");

    let not_pem = dir.join("ca.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let cfg = ClientConfig { ca_file: Some(not_pem), ..ClientConfig::new("https://127.0.0.1:1") };
    assert!(Client::new(cfg).unwrap_err().to_string().contains("holds no certificate"));
    assert!(Client::new(ClientConfig::new("https://u:p@h")).unwrap_err().to_string().contains("credentials"));
}

#[test]
fn a_refused_connection_says_so() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let e = Client::new(ClientConfig::new(format!("http://127.0.0.1:{port}"))).unwrap().get("/x").unwrap_err();
    assert!(e.is_unreachable(), "{e:?}");
    assert!(e.to_string().contains(&format!("cannot connect to `http://127.0.0.1:{port}/x`")), "{e}");
}

/// A server that answers every request on a connection: `/stream` with three chunked lines (the
/// second after a pause), anything else with `ok`. Counts connections.
fn chunked_server() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let conns = Arc::new(AtomicUsize::new(0));
    let counted = conns.clone();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            counted.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
                    let mut len = 0;
                    loop {
                        let mut h = String::new();
                        r.read_line(&mut h).unwrap();
                        if h.trim().is_empty() {
                            break;
                        }
                        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; len];
                    r.read_exact(&mut body).unwrap();
                    if path == "/stream" {
                        s.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n6\r\nline1\n\r\n").unwrap();
                        std::thread::sleep(Duration::from_millis(200));
                        s.write_all(b"c\r\nline2\r\nline3\r\n0\r\n\r\n").unwrap();
                    } else {
                        s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok").unwrap();
                    }
                }
            });
        }
    });
    (addr, conns)
}

#[test]
fn streamed_lines_and_keep_alive() {
    let (addr, conns) = chunked_server();
    let client = Client::plain(addr, Auth::bearer(Some("t0k")), Some(Duration::from_secs(5)));
    for _ in 0..5 {
        assert_eq!(client.get("/x").unwrap().text(), "ok");
    }
    assert_eq!(conns.load(Ordering::SeqCst), 1, "five requests, one connection");
    let mut lines = client.stream(&Request::get("/stream").read_timeout(Some(Duration::from_secs(5)))).unwrap();
    assert_eq!(lines.status, 200);
    let got: Vec<String> = std::iter::from_fn(|| lines.next_line().unwrap()).collect();
    assert_eq!(got, ["line1", "line2", "line3"]);
    let shown = format!("{client:?}");
    assert!(!shown.contains("t0k") && shown.contains("Bearer(<redacted>)"), "{shown}");
}

#[test]
fn a_per_request_header_supplier_sees_method_path_and_body() {
    let ca = TestCa::new("ca").unwrap();
    let dir = TempDir::new("http-supplier").unwrap();
    let hook = TlsWebhook::start(&ca.server().unwrap()).unwrap();
    let auth = Auth::Header(Arc::new(|method: &str, path: &str, body: &[u8]| {
        Some(format!("Sig {method} {path} {}", body.len()))
    }));
    let cfg =
        ClientConfig { ca_file: Some(ca.write(&dir, "ca").unwrap()), auth, ..ClientConfig::new(hook.url("/base")) };
    let client = Client::new(cfg).unwrap();
    client.post("/x?y=1", "text/plain", b"abc").unwrap();
    assert_eq!(hook.received()[0].header("authorization"), Some("Sig POST /base/x?y=1 3"));
}
