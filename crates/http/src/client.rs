//! [`ClientConfig`] → [`Client`]: one ureq agent (its keep-alive pool, its TLS settings) for one
//! base URL, and the requests, answers and streamed lines over it.

use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig, TlsProvider};

use crate::auth::Auth;
use crate::error::{Context, Error, classify, classify_io, status_help};
use crate::url::Url;

/// A client certificate and its key, for mutual TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The PEM certificate (the client's first, then any intermediates).
    pub cert_file: PathBuf,
    /// Its PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// What a [`Client`] is built from.
#[derive(Clone)]
pub struct ClientConfig {
    /// `http://host[:port][/prefix]` or `https://…`; request paths go under the prefix.
    pub base_url: String,
    /// A PEM file of the CAs that sign the server's certificate. It **replaces** the system's roots
    /// (a server on a site's own CA is trusted for exactly that CA); without it, the system's store
    /// (`SSL_CERT_FILE`, `/etc/ssl/certs`) is used, and Mozilla's roots where the system has none.
    pub ca_file: Option<PathBuf>,
    /// A client certificate for servers that ask for one.
    pub identity: Option<Identity>,
    /// The `Authorization` of every request.
    pub auth: Auth,
    /// Time to connect (TCP and the TLS handshake).
    pub connect_timeout: Duration,
    /// Time for a whole request, answer included (`None`: no limit; a stream sets its own).
    pub timeout: Option<Duration>,
    /// Time to wait for each read of the answer (`None`: no limit): what ends a stalled stream.
    pub read_timeout: Option<Duration>,
    /// The largest answer read whole.
    pub max_body: u64,
    /// Idle connections kept per host for reuse (keep-alive).
    pub keep_alive: usize,
    /// The `User-Agent` header.
    pub user_agent: String,
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("base_url", &self.base_url)
            .field("ca_file", &self.ca_file)
            .field("identity", &self.identity)
            .field("auth", &self.auth)
            .field("connect_timeout", &self.connect_timeout)
            .field("timeout", &self.timeout)
            .field("read_timeout", &self.read_timeout)
            .finish_non_exhaustive()
    }
}

impl ClientConfig {
    /// Defaults for `base_url`: no CA file, no identity, no auth, 5 s to connect, 30 s a request,
    /// 64 MiB at most, 4 idle connections kept.
    pub fn new(base_url: impl Into<String>) -> ClientConfig {
        ClientConfig {
            base_url: base_url.into(),
            ca_file: None,
            identity: None,
            auth: Auth::None,
            connect_timeout: Duration::from_secs(5),
            timeout: Some(Duration::from_secs(30)),
            read_timeout: None,
            max_body: 64 * 1024 * 1024,
            keep_alive: 4,
            user_agent: format!("bursar/{}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// One request: method, path under the base URL (with its query), headers, body and, when it
/// differs from the client's, its own deadlines.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    method: &'a str,
    path: &'a str,
    headers: Vec<(&'a str, &'a str)>,
    body: &'a [u8],
    timeout: Option<Option<Duration>>,
    read_timeout: Option<Option<Duration>>,
}

impl<'a> Request<'a> {
    /// `method path` with no body.
    pub fn new(method: &'a str, path: &'a str) -> Request<'a> {
        Request { method, path, headers: Vec::new(), body: b"", timeout: None, read_timeout: None }
    }

    /// `GET path`.
    pub fn get(path: &'a str) -> Request<'a> {
        Request::new("GET", path)
    }

    /// `POST path` with `body`.
    pub fn post(path: &'a str, body: &'a [u8]) -> Request<'a> {
        Request::new("POST", path).body(body)
    }

    /// Adds a header.
    pub fn header(mut self, name: &'a str, value: &'a str) -> Request<'a> {
        self.headers.push((name, value));
        self
    }

    /// Adds headers.
    pub fn headers(mut self, headers: &[(&'a str, &'a str)]) -> Request<'a> {
        self.headers.extend_from_slice(headers);
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: &'a [u8]) -> Request<'a> {
        self.body = body;
        self
    }

    /// This request's whole-request deadline instead of the client's.
    pub fn timeout(mut self, t: Option<Duration>) -> Request<'a> {
        self.timeout = Some(t);
        self
    }

    /// This request's per-read deadline instead of the client's.
    pub fn read_timeout(mut self, t: Option<Duration>) -> Request<'a> {
        self.read_timeout = Some(t);
        self
    }
}

/// An answer read whole.
#[derive(Debug, Clone)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// True for 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON.
    pub fn json(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// The body decoded as `T`.
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// A streamed answer read line by line as it arrives (a chunked JSON Lines or event stream).
pub struct Lines {
    /// The status code.
    pub status: u16,
    /// The headers, names lowercased.
    pub headers: Vec<(String, String)>,
    reader: BufReader<ureq::BodyReader<'static>>,
    client: Client,
    url: String,
}

impl fmt::Debug for Lines {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lines").field("status", &self.status).field("url", &self.url).finish_non_exhaustive()
    }
}

impl Lines {
    /// The next line without its line end; `None` at the end of the stream. A line longer than the
    /// client's `max_body` is an error.
    pub fn next_line(&mut self) -> Result<Option<String>, Error> {
        let limit = self.client.inner.max_body;
        let mut line = Vec::new();
        let n = (&mut self.reader)
            .take(limit + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| classify_io(e, &self.client.context(&self.url)))?;
        if n == 0 {
            return Ok(None);
        }
        if line.len() as u64 > limit {
            return Err(Error::TooLarge { url: self.url.clone(), limit });
        }
        if line.last() == Some(&b'\n') {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        }
        Ok(Some(String::from_utf8_lossy(&line).into_owned()))
    }

    /// The rest of the stream, read whole (what a stream that ends on its own returns).
    pub fn read_rest(mut self) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        let limit = self.client.inner.max_body;
        (&mut self.reader)
            .take(limit + 1)
            .read_to_end(&mut out)
            .map_err(|e| classify_io(e, &self.client.context(&self.url)))?;
        if out.len() as u64 > limit {
            return Err(Error::TooLarge { url: self.url, limit });
        }
        Ok(out)
    }
}

struct Inner {
    agent: ureq::Agent,
    base: Url,
    auth: Auth,
    ca_file: Option<String>,
    identity: Option<String>,
    connect_timeout: Duration,
    timeout: Option<Duration>,
    read_timeout: Option<Duration>,
    max_body: u64,
}

/// The HTTP client of one base URL. Cheap to clone (the clones share the keep-alive pool);
/// blocking; safe to use from several threads.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.inner.base.to_string())
            .field("ca_file", &self.inner.ca_file)
            .field("identity", &self.inner.identity)
            .field("auth", &self.inner.auth)
            .finish_non_exhaustive()
    }
}

/// The system's roots, read once per process; `None` when it has none (then Mozilla's are used).
fn system_roots() -> Option<Arc<Vec<Certificate<'static>>>> {
    static ROOTS: OnceLock<Option<Arc<Vec<Certificate<'static>>>>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            let certs: Vec<Certificate<'static>> =
                found.certs.iter().map(|c| Certificate::from_der(c.as_ref()).to_owned()).collect();
            (!certs.is_empty()).then(|| Arc::new(certs))
        })
        .clone()
}

fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| e.to_string())
}

fn ca_roots(path: &Path) -> Result<RootCerts, Error> {
    let bad = |problem: String| Error::CaFile { path: path.display().to_string(), problem };
    let pem = read_file(path).map_err(bad)?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        if let PemItem::Certificate(c) = item.map_err(|e| bad(e.to_string()))? {
            certs.push(c);
        }
    }
    if certs.is_empty() {
        return Err(bad("it holds no certificate".into()));
    }
    Ok(RootCerts::Specific(Arc::new(certs)))
}

fn identity(id: &Identity) -> Result<ClientCert, Error> {
    let bad = |problem: String| Error::ClientCert {
        cert: id.cert_file.display().to_string(),
        key: id.key_file.display().to_string(),
        problem,
    };
    let cert_pem = read_file(&id.cert_file).map_err(|e| bad(format!("the certificate: {e}")))?;
    let mut chain = Vec::new();
    for item in ureq::tls::parse_pem(&cert_pem) {
        if let PemItem::Certificate(c) = item.map_err(|e| bad(e.to_string()))? {
            chain.push(c);
        }
    }
    if chain.is_empty() {
        return Err(bad("the certificate file holds no certificate".into()));
    }
    let key_pem = read_file(&id.key_file).map_err(|e| bad(format!("the key: {e}")))?;
    let key = PrivateKey::from_pem(&key_pem).map_err(|e| bad(format!("the key: {e}")))?;
    // ureq panics on a key that does not fit its certificate: check here, with rustls's own test.
    use rustls_pki_types::pem::PemObject;
    let key_der =
        rustls_pki_types::PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| bad(format!("the key: {e}")))?;
    let ders = chain.iter().map(|c| rustls_pki_types::CertificateDer::from(c.der().to_vec())).collect();
    rustls::sign::CertifiedKey::from_der(ders, key_der, &rustls::crypto::ring::default_provider())
        .map_err(|e| bad(format!("the key does not fit the certificate: {e}")))?;
    Ok(ClientCert::new_with_certs(&chain, key))
}

fn shown(d: Option<Duration>) -> String {
    d.map_or_else(|| "no limit".to_owned(), |d| format!("{d:?}"))
}

impl Client {
    /// Builds the client: parses the URL, reads the CA file and the client certificate. Secrets
    /// are already read (they are in `config.auth`).
    pub fn new(config: ClientConfig) -> Result<Client, Error> {
        let base = Url::parse_with_query(&config.base_url)?;
        let tls = Client::tls(&base, &config)?;
        Ok(Client::build(config, base, tls))
    }

    fn tls(base: &Url, config: &ClientConfig) -> Result<TlsConfig, Error> {
        let mut tls = TlsConfig::builder().provider(TlsProvider::Rustls);
        if base.is_https() || config.ca_file.is_some() || config.identity.is_some() {
            let roots = match &config.ca_file {
                Some(path) => ca_roots(path)?,
                None => system_roots().map_or(RootCerts::WebPki, RootCerts::Specific),
            };
            tls = tls.root_certs(roots);
            if let Some(id) = &config.identity {
                tls = tls.client_cert(Some(identity(id)?));
            }
        }
        Ok(tls.build())
    }

    fn build(config: ClientConfig, base: Url, tls: TlsConfig) -> Client {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .max_redirects(0)
            .max_redirects_will_error(false)
            .user_agent(config.user_agent.as_str())
            .no_delay(true)
            .timeout_connect(Some(config.connect_timeout))
            .timeout_global(config.timeout)
            .timeout_per_read(config.read_timeout)
            .max_idle_connections_per_host(config.keep_alive.max(1))
            .max_idle_connections(config.keep_alive.max(1) * 4)
            .tls_config(tls)
            .build()
            .new_agent();
        Client {
            inner: Arc::new(Inner {
                agent,
                base,
                auth: config.auth,
                ca_file: config.ca_file.map(|p| p.display().to_string()),
                identity: config.identity.map(|i| i.cert_file.display().to_string()),
                connect_timeout: config.connect_timeout,
                timeout: config.timeout,
                read_timeout: config.read_timeout,
                max_body: config.max_body,
            }),
        }
    }

    /// A plain-HTTP client of `addr` (a loopback server, say): cannot fail, reads no file.
    pub fn plain(addr: SocketAddr, auth: Auth, timeout: Option<Duration>) -> Client {
        let config = ClientConfig { auth, timeout, ..ClientConfig::new(format!("http://{addr}")) };
        let tls = TlsConfig::builder().provider(TlsProvider::Rustls).build();
        Client::build(config, Url::from_addr(addr), tls)
    }

    /// The base URL.
    pub fn base(&self) -> &Url {
        &self.inner.base
    }

    /// The full URL of `path` (under the base prefix), as error messages name it.
    pub fn url_of(&self, path: &str) -> String {
        self.inner.base.join(&self.inner.base.under(path))
    }

    /// What an error message needs (made only when a request failed).
    fn context<'a>(&'a self, url: &'a str) -> Context<'a> {
        Context {
            url,
            host: self.inner.base.host(),
            ca_file: self.inner.ca_file.as_deref(),
            client_cert: self.inner.identity.as_deref(),
            connect_timeout: format!("{:?}", self.inner.connect_timeout),
            timeout: shown(self.inner.timeout),
            read_timeout: shown(self.inner.read_timeout),
        }
    }

    fn start(&self, req: &Request<'_>) -> Result<(String, ureq::http::Response<ureq::Body>), Error> {
        let path = self.inner.base.under(req.path);
        let url = self.inner.base.join(&path);
        let fail = |e: ureq::Error| classify(e, &self.context(&url));
        let mut b = ureq::http::Request::builder().method(req.method).uri(&url);
        if let Some(value) = self.inner.auth.header(req.method, &path, req.body) {
            b = b.header("authorization", value);
        }
        for (k, v) in &req.headers {
            b = b.header(*k, *v);
        }
        let no_body = req.body.is_empty() && matches!(req.method, "GET" | "HEAD" | "DELETE" | "OPTIONS");
        let answer = if no_body {
            let r = b.body(()).map_err(|e| Error::Protocol { url: url.clone(), message: e.to_string() })?;
            let mut cfg = self.inner.agent.configure_request(r);
            if let Some(t) = req.timeout {
                cfg = cfg.timeout_global(t);
            }
            if let Some(t) = req.read_timeout {
                cfg = cfg.timeout_per_read(t);
            }
            self.inner.agent.run(cfg.build())
        } else {
            let r = b.body(req.body).map_err(|e| Error::Protocol { url: url.clone(), message: e.to_string() })?;
            let mut cfg = self.inner.agent.configure_request(r);
            if let Some(t) = req.timeout {
                cfg = cfg.timeout_global(t);
            }
            if let Some(t) = req.read_timeout {
                cfg = cfg.timeout_per_read(t);
            }
            self.inner.agent.run(cfg.build())
        };
        let answer = answer.map_err(fail)?;
        Ok((url, answer))
    }

    fn parts(answer: &ureq::http::Response<ureq::Body>) -> (u16, Vec<(String, String)>) {
        let headers = answer
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_ascii_lowercase(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        (answer.status().as_u16(), headers)
    }

    /// Sends `req` and reads the whole answer, whatever its status.
    pub fn send(&self, req: &Request<'_>) -> Result<Response, Error> {
        let (url, answer) = self.start(req)?;
        let (status, headers) = Client::parts(&answer);
        let body = answer
            .into_body()
            .into_with_config()
            .limit(self.inner.max_body)
            .read_to_vec()
            .map_err(|e| classify(e, &self.context(&url)))?;
        Ok(Response { status, headers, body })
    }

    /// Sends `req` and returns its answer as lines, read as they arrive (keep-alive streams).
    pub fn stream(&self, req: &Request<'_>) -> Result<Lines, Error> {
        let (url, answer) = self.start(req)?;
        let (status, headers) = Client::parts(&answer);
        let reader = BufReader::with_capacity(64 * 1024, answer.into_body().into_reader());
        Ok(Lines { status, headers, reader, client: self.clone(), url })
    }

    /// `GET path`, whatever the status.
    pub fn get(&self, path: &str) -> Result<Response, Error> {
        self.send(&Request::get(path))
    }

    /// `POST path` with `body` of `content_type`, whatever the status.
    pub fn post(&self, path: &str, content_type: &str, body: &[u8]) -> Result<Response, Error> {
        self.send(&Request::post(path, body).header("content-type", content_type))
    }

    /// `r` when it is a 2xx, else [`Error::Status`] with the start of its body and a `help:` line
    /// (a 401 names the credential setting to check).
    pub fn check(&self, path: &str, r: Response) -> Result<Response, Error> {
        if r.is_success() {
            return Ok(r);
        }
        let text = r.text();
        let body: String = text.trim().chars().take(300).collect();
        let help = status_help(r.status, self.inner.auth.kind(), &body);
        Err(Error::Status { url: self.url_of(path), status: r.status, body, help })
    }

    /// `GET path` with `accept: application/json`; a 2xx body decoded as `T`.
    pub fn get_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        let r = self.send(&Request::get(path).header("accept", "application/json"))?;
        let r = self.check(path, r)?;
        r.decode().map_err(|e| Error::Json { url: self.url_of(path), message: e.to_string() })
    }

    /// `POST path` with `value` as JSON; the answer must be a 2xx (its body is returned).
    pub fn post_json<B: serde::Serialize + ?Sized>(&self, path: &str, value: &B) -> Result<Response, Error> {
        self.post_json_with(path, value, &[])
    }

    /// Like [`Client::post_json`] with extra headers.
    pub fn post_json_with<B: serde::Serialize + ?Sized>(
        &self,
        path: &str,
        value: &B,
        headers: &[(&str, &str)],
    ) -> Result<Response, Error> {
        let body =
            serde_json::to_vec(value).map_err(|e| Error::Json { url: self.url_of(path), message: e.to_string() })?;
        let r = self.send(&Request::post(path, &body).header("content-type", "application/json").headers(headers))?;
        self.check(path, r)
    }
}
