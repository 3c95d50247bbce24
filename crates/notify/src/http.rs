//! One blocking HTTP/1.1 `POST` of a JSON body with a connect and read timeout: enough for
//! Alertmanager's `/api/v2/alerts` and a webhook.
//!
//! Why not `bursar-client`'s transport: it talks to `bursar serve` on a loopback `SocketAddr` with no
//! connect timeout, while a sink is named by DNS and may be down, which must cost one `timeout`, not
//! the kernel's SYN retries. `bursar-prometheus` has the same shape for its GETs, privately. Plain
//! TCP, no TLS (an `https` sink goes through a local proxy, or through Alertmanager, which speaks
//! TLS to its receivers).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The most of an answer read (sinks answer with a few bytes).
const MAX_ANSWER: u64 = 1024 * 1024;

/// `http://host[:port][/prefix]`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    host: String,
    port: u16,
    path: String,
}

impl Endpoint {
    /// Parses `http://host[:port][/path]` (port 80 when absent; IPv6 hosts in brackets).
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let bad = || {
            format!(
                "`{url}` is not an `http://host:port[/path]` URL\n  help: https is not supported here: send through a local proxy, or through Alertmanager"
            )
        };
        let rest = url.strip_prefix("http://").ok_or_else(bad)?;
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains('@') || path.contains('#') {
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
        Ok(Endpoint { host: host.to_owned(), port, path: path.to_owned() })
    }

    /// `host:port` as sent in `Host`.
    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The path of the URL itself (`/` when it has none).
    pub fn own_path(&self) -> &str {
        if self.path.is_empty() { "/" } else { &self.path }
    }

    /// `api` under the URL's path prefix, e.g. `/alertmanager/api/v2/alerts`.
    pub fn under(&self, api: &str) -> String {
        format!("{}{api}", self.path.trim_end_matches('/'))
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}{}", self.authority(), self.path)
    }
}

/// POSTs `body` (JSON) to `path` at `ep` and returns the status and (the start of) the answer.
pub fn post_json(
    ep: &Endpoint,
    path: &str,
    body: &[u8],
    headers: &[(&str, &str)],
    timeout: Duration,
) -> io::Result<(u16, String)> {
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
        "POST {path} HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nuser-agent: bursar-notify\r\nconnection: close\r\n",
        ep.authority(),
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes)?;
    read_status(BufReader::new(stream))
}

/// The status line and the body (lossy, at most 1 MiB) of an answer on a `connection: close`.
fn read_status<R: BufRead>(mut r: R) -> io::Result<(u16, String)> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed before the answer"));
    }
    let status =
        line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, format!("bad status line `{}`", line.trim_end()))
        })?;
    let mut rest = Vec::new();
    r.take(MAX_ANSWER).read_to_end(&mut rest)?;
    let text = String::from_utf8_lossy(&rest);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.trim().to_owned()).unwrap_or_default();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("http://am.example:9093/alertmanager/").unwrap();
        assert_eq!(e.under("/api/v2/alerts"), "/alertmanager/api/v2/alerts");
        assert_eq!(e.to_string(), "http://am.example:9093/alertmanager/");
        let w = Endpoint::parse("http://127.0.0.1:8080/hook?team=a").unwrap();
        assert_eq!(w.own_path(), "/hook?team=a");
        assert_eq!(Endpoint::parse("http://h").unwrap().own_path(), "/");
        assert_eq!(Endpoint::parse("http://[::1]:9093").unwrap().authority(), "[::1]:9093");
        for bad in ["https://x", "x:1", "http://", "http://h:p", "http://u@h", "http://h:0"] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_status_and_body_are_read() {
        let (s, b) = read_status(&b"HTTP/1.1 400 Bad Request\r\ncontent-length: 4\r\n\r\nnope"[..]).unwrap();
        assert_eq!((s, b.as_str()), (400, "nope"));
        assert!(read_status(&b""[..]).is_err());
    }
}
