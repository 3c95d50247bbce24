//! TLS for tests (feature `tls`): a throw-away CA that issues server and client certificates
//! ([`TestCa`], with rcgen), the `--web.config.file` that turns on TLS and basic auth in Prometheus
//! and Alertmanager ([`WebConfig`], with a bcrypt hash), a small https client to probe such a
//! server ([`https_get`]), and an https webhook receiver ([`TlsWebhook`]).
//!
//! Every certificate is made by the test that uses it, in its own folder; nothing is read from or
//! written to the system's trust store.

use std::io::{self, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::webhook::Received;

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// A certificate and its key, PEM.
#[derive(Debug, Clone)]
pub struct Leaf {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key (PKCS#8).
    pub key_pem: String,
}

impl Leaf {
    /// Writes `<stem>.pem` and `<stem>-key.pem` into `dir`, returning their paths.
    pub fn write(&self, dir: &Path, stem: &str) -> io::Result<(PathBuf, PathBuf)> {
        let cert = dir.join(format!("{stem}.pem"));
        let key = dir.join(format!("{stem}-key.pem"));
        std::fs::write(&cert, &self.cert_pem)?;
        std::fs::write(&key, &self.key_pem)?;
        Ok((cert, key))
    }
}

/// A certificate authority made for one test.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// A new CA whose subject is `CN=<name>`.
    pub fn new(name: &str) -> io::Result<TestCa> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(other)?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().map_err(other)?;
        Ok(TestCa { issuer: CertifiedIssuer::self_signed(params, key).map_err(other)? })
    }

    /// The CA's certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// Writes the CA's certificate to `dir/<stem>.pem`.
    pub fn write(&self, dir: &Path, stem: &str) -> io::Result<PathBuf> {
        let path = dir.join(format!("{stem}.pem"));
        std::fs::write(&path, self.cert_pem())?;
        Ok(path)
    }

    fn leaf(&self, cn: &str, org: Option<&str>, sans: &[&str], eku: ExtendedKeyUsagePurpose) -> io::Result<Leaf> {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).map_err(other)?;
        params.distinguished_name.push(DnType::CommonName, cn);
        if let Some(o) = org {
            params.distinguished_name.push(DnType::OrganizationName, o);
        }
        params.extended_key_usages = vec![eku];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().map_err(other)?;
        let cert = params.signed_by(&key, &*self.issuer).map_err(other)?;
        Ok(Leaf { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    /// A server certificate for `127.0.0.1` and `localhost`.
    pub fn server(&self) -> io::Result<Leaf> {
        self.leaf("127.0.0.1", None, &["127.0.0.1", "localhost"], ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate with subject `CN=<cn>, O=<org>` and `dns` as SAN DNS names.
    pub fn client(&self, cn: &str, org: &str, dns: &[&str]) -> io::Result<Leaf> {
        self.leaf(cn, Some(org), dns, ExtendedKeyUsagePurpose::ClientAuth)
    }
}

/// A bcrypt hash of `password` at the lowest cost (4): `basic_auth_users` refuses plain text.
pub fn bcrypt_hash(password: &str) -> io::Result<String> {
    bcrypt::hash(password, 4).map_err(other)
}

/// A `--web.config.file` for Prometheus or Alertmanager: TLS with a server certificate of `ca`,
/// basic auth for one user. Keeps what a probe needs to reach the server.
#[derive(Debug, Clone)]
pub struct WebConfig {
    /// The `web.yml` file.
    pub path: PathBuf,
    /// The CA that signed the server's certificate, PEM.
    pub ca_pem: String,
    /// The user.
    pub user: String,
    /// Their password (in plain text, for the test's own probes).
    pub password: String,
}

impl WebConfig {
    /// Writes `web.yml` and the server's certificate and key into `dir`.
    pub fn new(dir: &Path, ca: &TestCa, user: &str, password: &str) -> io::Result<WebConfig> {
        let (cert, key) = ca.server()?.write(dir, "web-server")?;
        let yml = format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  {user}: '{}'\n",
            cert.display(),
            key.display(),
            bcrypt_hash(password)?
        );
        let path = dir.join("web.yml");
        std::fs::write(&path, yml)?;
        Ok(WebConfig { path, ca_pem: ca.cert_pem(), user: user.to_owned(), password: password.to_owned() })
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn base64(input: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            out.push(if i <= chunk.len() { char::from(ABC[((n >> shift) & 63) as usize]) } else { '=' });
        }
    }
    out
}

/// One GET over TLS (HTTP/1.0, trusting only `ca_pem`, with basic auth when given): status and body.
pub fn https_get(addr: SocketAddr, ca_pem: &str, path: &str, auth: Option<(&str, &str)>) -> io::Result<(u16, String)> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.map_err(other)?).map_err(other)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(other)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(addr.ip().to_string()).map_err(other)?;
    let conn = rustls::ClientConnection::new(Arc::new(config), name).map_err(other)?;
    let sock = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let mut head = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n");
    if let Some((u, p)) = auth {
        head.push_str(&format!("Authorization: Basic {}\r\n", base64(format!("{u}:{p}").as_bytes())));
    }
    head.push_str("\r\n");
    tls.write_all(head.as_bytes())?;
    let mut buf = Vec::new();
    match tls.read_to_end(&mut buf) {
        Ok(_) => {}
        // Go servers close without a TLS close_notify after an HTTP/1.0 answer.
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && !buf.is_empty() => {}
        Err(e) => return Err(e),
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}

/// A rustls server configuration for `leaf` (no client certificates asked).
pub fn server_config(leaf: &Leaf) -> io::Result<Arc<rustls::ServerConfig>> {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(leaf.cert_pem.as_bytes()).collect::<Result<_, _>>().map_err(other)?;
    let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).map_err(other)?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(other)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(other)?;
    Ok(Arc::new(config))
}

#[derive(Debug, Default)]
struct Shared {
    got: Mutex<Vec<Received>>,
    status: AtomicU16,
    stop: AtomicBool,
}

/// An https webhook receiver on `127.0.0.1:0`: records every POST (path, headers, body) and answers
/// with the status the test sets (200 by default). A thread per connection; keep-alive honoured.
#[derive(Debug)]
pub struct TlsWebhook {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

fn handle(stream: TcpStream, config: Arc<rustls::ServerConfig>, shared: &Shared) -> io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let conn = rustls::ServerConnection::new(config).map_err(other)?;
    let mut r = BufReader::new(rustls::StreamOwned::new(conn, stream));
    loop {
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
        let s = r.get_mut();
        write!(s, "HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n")?;
        s.flush()?;
    }
}

impl TlsWebhook {
    /// Starts a receiver serving `leaf` (a server certificate of the test's CA).
    pub fn start(leaf: &Leaf) -> io::Result<TlsWebhook> {
        let config = server_config(leaf)?;
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new().name("tls-webhook".into()).spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::Relaxed) {
                    return;
                }
                if let Ok(c) = conn {
                    let (config, s) = (config.clone(), s.clone());
                    let _ = std::thread::Builder::new().name("tls-webhook-conn".into()).spawn(move || {
                        let _ = handle(c, config, &s);
                    });
                }
            }
        })?;
        Ok(TlsWebhook { addr, shared, thread: Some(thread) })
    }

    /// `https://127.0.0.1:PORT<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
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

impl Drop for TlsWebhook {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
