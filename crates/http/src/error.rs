//! [`Error`]: why a request failed, naming the URL, with a `help:` line that says what to do, and
//! the translation of ureq's and rustls's errors into it ([`classify`]).

use std::io;

use crate::auth::SecretError;
use crate::url::UrlError;

/// Why a client could not be built or a request failed. Every message names the URL (or the file)
/// and ends with a `help:` line where one helps.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The base URL is not one this client takes.
    #[error("{0}")]
    Url(#[from] UrlError),
    /// The CA file cannot be used.
    #[error(
        "cannot use the CA file `{path}` (`ca_file`): {problem}\n  help: it must be a PEM file with one or more `-----BEGIN CERTIFICATE-----` blocks: the CA that issued the server's certificate"
    )]
    CaFile {
        /// The file.
        path: String,
        /// What is wrong.
        problem: String,
    },
    /// The client certificate or its key cannot be used.
    #[error(
        "cannot use the client certificate `{cert}` with the key `{key}`: {problem}\n  help: `client_cert` is a PEM certificate (chain), `client_key` its PEM private key (PKCS#8, PKCS#1 or SEC1)"
    )]
    ClientCert {
        /// The certificate file.
        cert: String,
        /// The key file.
        key: String,
        /// What is wrong.
        problem: String,
    },
    /// A secret could not be read.
    #[error("{0}")]
    Secret(#[from] SecretError),
    /// No connection: refused, no route, no such host.
    #[error(
        "cannot connect to `{url}`: {source}\n  help: check that the server runs and that the URL names its host and port"
    )]
    Connect {
        /// The URL.
        url: String,
        /// The error.
        source: io::Error,
    },
    /// A deadline passed.
    #[error("`{url}`: no answer within {limit} ({phase})\n  help: {help}")]
    Timeout {
        /// The URL.
        url: String,
        /// Which deadline.
        phase: &'static str,
        /// Its length, as configured.
        limit: String,
        /// What to check.
        help: &'static str,
    },
    /// The server's certificate is not trusted.
    #[error("the certificate of `{url}` is not trusted: {problem}\n  help: {help}")]
    Certificate {
        /// The URL.
        url: String,
        /// What is wrong with it.
        problem: String,
        /// What to do.
        help: String,
    },
    /// The TLS handshake failed for another reason (the server refused ours, or does not speak TLS).
    #[error("TLS with `{url}` failed: {problem}\n  help: {help}")]
    Tls {
        /// The URL.
        url: String,
        /// What happened.
        problem: String,
        /// What to do.
        help: String,
    },
    /// The connection broke during the exchange.
    #[error("`{url}`: the connection broke: {source}")]
    Io {
        /// The URL.
        url: String,
        /// The error.
        source: io::Error,
    },
    /// The answer is not HTTP/1.1.
    #[error("`{url}` did not answer in HTTP/1.1: {message}")]
    Protocol {
        /// The URL.
        url: String,
        /// What was wrong.
        message: String,
    },
    /// The answer (or one line of a stream) is larger than allowed.
    #[error("the answer of `{url}` is larger than {limit} bytes")]
    TooLarge {
        /// The URL.
        url: String,
        /// The limit.
        limit: u64,
    },
    /// The server answered an error status (from the helpers that expect a 2xx).
    #[error("`{url}` answered HTTP {status}: {body}{help}")]
    Status {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
        /// The start of the body.
        body: String,
        /// `\n  help: …`, or empty.
        help: String,
    },
    /// A 2xx answer whose body is not the JSON expected.
    #[error("`{url}` answered JSON that does not fit: {message}")]
    Json {
        /// The URL.
        url: String,
        /// What did not fit.
        message: String,
    },
}

impl Error {
    /// True when no connection could be made or it broke or timed out (the server may come back).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Error::Connect { .. } | Error::Timeout { .. } | Error::Io { .. })
    }

    /// The status of an [`Error::Status`].
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// This error as an `io::Error` of the same kind where there is one (for callers with an
    /// `io::Result` API).
    pub fn into_io(self) -> io::Error {
        let kind = match &self {
            Error::Connect { source, .. } | Error::Io { source, .. } => source.kind(),
            Error::Timeout { .. } => io::ErrorKind::TimedOut,
            Error::Protocol { .. } | Error::Json { .. } | Error::TooLarge { .. } => io::ErrorKind::InvalidData,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, self)
    }
}

/// What the client knew when the request failed: enough to say what to do.
pub(crate) struct Context<'a> {
    pub url: &'a str,
    pub host: &'a str,
    pub ca_file: Option<&'a str>,
    pub client_cert: Option<&'a str>,
    pub connect_timeout: String,
    pub timeout: String,
    pub read_timeout: String,
}

/// The help line of an error status, by what the client sent.
pub(crate) fn status_help(status: u16, auth: &str, body: &str) -> String {
    let help = match (status, auth) {
        (400, _) if body.contains("HTTPS server") => "the server speaks TLS: write the URL with `https://`",
        (401, "none") => "the server wants credentials: set `basic_auth` or `bearer_token_file`",
        (401, "basic") => "check `basic_auth`: the user name and the password in its `password_file`",
        (401, "bearer") => "check the token (`bearer_token_file`)",
        (401, _) => "the server refused the credentials",
        (403, _) => "the credentials were accepted but are not allowed this request",
        _ => return String::new(),
    };
    format!("\n  help: {help}")
}

/// Translates an error of ureq (or of rustls inside it) into an [`Error`].
pub(crate) fn classify(e: ureq::Error, cx: &Context<'_>) -> Error {
    let url = cx.url.to_owned();
    match e {
        ureq::Error::Io(io) => classify_io(io, cx),
        ureq::Error::Rustls(r) => tls(r, cx),
        ureq::Error::Timeout(t) => timeout(t, cx),
        ureq::Error::HostNotFound => Error::Connect {
            url,
            source: io::Error::new(io::ErrorKind::NotFound, format!("the host `{}` is not known", cx.host)),
        },
        ureq::Error::ConnectionFailed => {
            Error::Connect { url, source: io::Error::new(io::ErrorKind::ConnectionRefused, "no connection") }
        }
        ureq::Error::BodyExceedsLimit(limit) => Error::TooLarge { url, limit },
        ureq::Error::LargeResponseHeader(_, limit) => Error::TooLarge { url, limit: limit as u64 },
        ureq::Error::Tls(m) => Error::Tls { url, problem: m.to_owned(), help: "check the URL's host name".into() },
        ureq::Error::BadUri(m) => Error::Protocol { url, message: format!("bad URI: {m}") },
        other => Error::Protocol { url, message: other.to_string() },
    }
}

/// An I/O error: a rustls error or a ureq error inside it, else a connection problem.
pub(crate) fn classify_io(io: io::Error, cx: &Context<'_>) -> Error {
    let url = cx.url.to_owned();
    if io.get_ref().is_some_and(|i| i.is::<rustls::Error>() || i.is::<ureq::Error>()) {
        let kind = io.kind();
        match io.into_inner().map(|i| i.downcast::<rustls::Error>()) {
            Some(Ok(r)) => return tls(*r, cx),
            Some(Err(other)) => match other.downcast::<ureq::Error>() {
                Ok(u) => return classify(*u, cx),
                Err(other) => return Error::Io { url, source: io::Error::new(kind, other) },
            },
            None => return Error::Io { url, source: io::Error::from(kind) },
        }
    }
    match io.kind() {
        io::ErrorKind::ConnectionRefused
        | io::ErrorKind::NotFound
        | io::ErrorKind::AddrNotAvailable
        | io::ErrorKind::HostUnreachable
        | io::ErrorKind::NetworkUnreachable => Error::Connect { url, source: io },
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Error::Timeout {
            url,
            phase: "reading the answer",
            limit: cx.read_timeout.clone(),
            help: "the server is slow or stalled; raise the timeout if it is expected",
        },
        _ => Error::Io { url, source: io },
    }
}

fn timeout(t: ureq::Timeout, cx: &Context<'_>) -> Error {
    let (phase, limit, help) = match t {
        ureq::Timeout::Connect | ureq::Timeout::Resolve => {
            ("connecting", &cx.connect_timeout, "check that the host is up and that no firewall drops the connection")
        }
        ureq::Timeout::PerRead => {
            ("waiting for the next bytes", &cx.read_timeout, "the server stalled; it is retried on the next attempt")
        }
        _ => {
            ("the whole request", &cx.timeout, "the server is slow or overloaded; raise `timeout` if that is expected")
        }
    };
    Error::Timeout { url: cx.url.to_owned(), phase, limit: limit.clone(), help }
}

fn tls(r: rustls::Error, cx: &Context<'_>) -> Error {
    use rustls::{AlertDescription as A, CertificateError as C};
    let url = cx.url.to_owned();
    let trust = match cx.ca_file {
        Some(ca) => format!(
            "the CA file `{ca}` (`ca_file`) does not sign it: set `ca_file` to the PEM of the CA that issued the server's certificate"
        ),
        None => "no CA of the system's store signs it: set `ca_file` to the PEM of the CA that issued the server's certificate".into(),
    };
    match r {
        rustls::Error::InvalidCertificate(c) => {
            let (problem, help) = match c {
                C::UnknownIssuer | C::BadSignature => ("it is not signed by a trusted CA".to_owned(), trust),
                C::NotValidForName | C::NotValidForNameContext { .. } => (
                    format!("it is not issued for `{}`", cx.host),
                    format!(
                        "connect by a name the certificate carries (its subjectAltName), or reissue it for `{}`",
                        cx.host
                    ),
                ),
                C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. } => (
                    "it is expired or not yet valid".to_owned(),
                    "renew the server's certificate (and check both clocks)".to_owned(),
                ),
                other => (format!("{other:?}"), trust),
            };
            Error::Certificate { url, problem, help }
        }
        rustls::Error::AlertReceived(a) => {
            let help = match (a, cx.client_cert) {
                (A::CertificateRequired | A::HandshakeFailure, None) => {
                    "the server may require a client certificate: set `client_cert` and `client_key`".to_owned()
                }
                (A::BadCertificate | A::UnknownCA | A::CertificateUnknown | A::AccessDenied, Some(c)) => format!(
                    "the server does not accept the client certificate `{c}`: it must be signed by a CA the server trusts for clients"
                ),
                _ => "check the server's TLS settings and its log".to_owned(),
            };
            Error::Tls { url, problem: format!("the server sent the alert `{a:?}`"), help }
        }
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. } => Error::Tls {
            url,
            problem: "the server did not answer in TLS".into(),
            help: "if it serves plain HTTP, write the URL with `http://`".into(),
        },
        other => Error::Tls { url, problem: other.to_string(), help: "check the server's TLS settings".into() },
    }
}
