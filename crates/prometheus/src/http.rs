//! One blocking HTTP/1.1 GET with a connect timeout, enough for Prometheus's query API.
//!
//! `bursar-client`'s transport talks to `bursar serve` on loopback: it takes a `SocketAddr` and
//! connects without a timeout. A Prometheus server is usually on another host, named by DNS, and a
//! host that is down must cost one `timeout`, not the kernel's two-minute SYN retry, so this file
//! resolves the name and connects with `connect_timeout`. It sends `Connection: close` and reads
//! the answer to the end (`Content-Length`, chunked, or until the server closes).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::config::ConfigError;

/// The largest answer read (a query over a very large cluster is a few MiB).
const MAX_BODY: usize = 256 * 1024 * 1024;

/// Where Prometheus listens: host, port and the path prefix of its API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    host: String,
    port: u16,
    prefix: String,
}

impl Endpoint {
    /// Parses `http://host[:port][/prefix]` (port 80 when absent; IPv6 hosts in brackets).
    pub fn parse(url: &str) -> Result<Endpoint, ConfigError> {
        let bad = || ConfigError::Server(url.to_owned());
        let rest = url.strip_prefix("http://").ok_or_else(bad)?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains('@') || path.contains(['?', '#']) {
            return Err(bad());
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(bad)?;
            match after.strip_prefix(':') {
                Some(p) => (h, p.parse().map_err(|_| bad())?),
                None if after.is_empty() => (h, 80),
                None => return Err(bad()),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, p.parse().map_err(|_| bad())?),
                None => (authority, 80),
            }
        };
        if host.is_empty() || port == 0 {
            return Err(bad());
        }
        Ok(Endpoint { host: host.to_owned(), port, prefix: path.trim_end_matches('/').to_owned() })
    }

    /// `host:port`, as sent in the `Host` header.
    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The path of `api` under the prefix, e.g. `/prometheus/api/v1/query`.
    pub fn path(&self, api: &str) -> String {
        format!("{}{api}", self.prefix)
    }
}

/// An HTTP answer: status and body.
#[derive(Debug)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Sends `GET path_and_query` and reads the whole answer.
pub fn get(ep: &Endpoint, path_and_query: &str, token: Option<&str>, timeout: Duration) -> io::Result<Answer> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, format!("`{}` resolves to no address", ep.host));
    let mut stream = None;
    for addr in (ep.host.as_str(), ep.port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e,
        }
    }
    let mut stream = stream.ok_or(last)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut head = format!(
        "GET {path_and_query} HTTP/1.1\r\nhost: {}\r\naccept: application/json\r\nuser-agent: bursar-prometheus\r\nconnection: close\r\n",
        ep.authority()
    );
    if let Some(t) = token {
        head.push_str(&format!("authorization: Bearer {t}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    read_answer(BufReader::new(stream))
}

/// Reads a status line, headers and body from `r`.
pub fn read_answer<R: BufRead>(mut r: R) -> io::Result<Answer> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed before the answer"));
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(format!("bad status line `{}`", line.trim_end())))?;
    let (mut chunked, mut length) = (false, None);
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed inside the headers"));
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            let (k, v) = (k.trim(), v.trim());
            if k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked") {
                chunked = true;
            } else if k.eq_ignore_ascii_case("content-length") {
                length = Some(v.parse::<usize>().map_err(|_| bad(format!("bad content-length `{v}`")))?);
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let size = line.trim().split(';').next().unwrap_or("");
            let size = usize::from_str_radix(size, 16).map_err(|_| bad(format!("bad chunk size `{}`", line.trim())))?;
            if size == 0 {
                break;
            }
            if body.len() + size > MAX_BODY {
                return Err(bad("answer larger than 256 MiB"));
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..])?;
            let mut crlf = [0u8; 2];
            r.read_exact(&mut crlf)?;
        }
    } else if let Some(n) = length {
        if n > MAX_BODY {
            return Err(bad("answer larger than 256 MiB"));
        }
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else {
        r.take(MAX_BODY as u64 + 1).read_to_end(&mut body)?;
        if body.len() > MAX_BODY {
            return Err(bad("answer larger than 256 MiB"));
        }
    }
    Ok(Answer { status, body })
}

/// Percent-encodes a query-string component.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3 / 2);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("http://mon.example:9090/prometheus/").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.path("/api/v1/query").as_str()),
            ("mon.example", 9090, "/prometheus/api/v1/query")
        );
        assert_eq!(Endpoint::parse("http://127.0.0.1").unwrap().port, 80);
        let v6 = Endpoint::parse("http://[::1]:9090").unwrap();
        assert_eq!((v6.host.as_str(), v6.authority().as_str()), ("::1", "[::1]:9090"));
        for bad in
            ["https://x:9090", "x:9090", "http://", "http://h:notaport", "http://u@h:1", "http://h:0", "http://h/?q"]
        {
            assert!(Endpoint::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn answers_with_length_chunks_or_close() {
        let a = read_answer(&b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"[..]).unwrap();
        assert_eq!((a.status, a.body.as_slice()), (200, &b"hello"[..]));
        let a = read_answer(
            &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x\r\nlo\r\n0\r\n\r\n"[..],
        )
        .unwrap();
        assert_eq!(a.body, b"hello");
        let a = read_answer(&b"HTTP/1.0 503 Service Unavailable\r\n\r\nbusy"[..]).unwrap();
        assert_eq!((a.status, a.body.as_slice()), (503, &b"busy"[..]));
        assert!(read_answer(&b""[..]).is_err());
        assert!(read_answer(&b"garbage\r\n\r\n"[..]).is_err());
        assert!(read_answer(&b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort"[..]).is_err());
    }

    #[test]
    fn encoding() {
        assert_eq!(encode(r#"up{job="a b"}"#), "up%7Bjob%3D%22a%20b%22%7D");
        assert_eq!(encode("1764581460.000"), "1764581460.000");
    }
}
