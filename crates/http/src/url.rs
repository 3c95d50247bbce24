//! A base URL: `http://` or `https://`, a host (a name, an IPv4 address or an IPv6 address in
//! brackets), an optional port and an optional path prefix that every request path goes under
//! (`https://mon.example/prometheus` + `/api/v1/query`).
//!
//! Deliberately narrow: no user info (`user:pass@host` would put a secret in every log line that
//! names the URL; credentials are set with [`crate::Auth`]), no fragment, and a query only where a
//! caller asks for one ([`Url::parse_with_query`], a webhook's own URL).

use std::fmt;

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS.
    Https,
}

/// A parsed base URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    scheme: Scheme,
    host: String,
    port: u16,
    /// The path prefix without a trailing slash (empty for none), with the query if one was allowed.
    path: String,
}

/// Why a URL was refused: the text and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{url}` is not an `http://host[:port][/path]` or `https://…` URL: {problem}")]
pub struct UrlError {
    /// The text given.
    pub url: String,
    /// What is wrong.
    pub problem: &'static str,
}

impl Url {
    /// Parses a base URL without a query.
    pub fn parse(url: &str) -> Result<Url, UrlError> {
        Url::parse_inner(url, false)
    }

    /// Parses a URL that may carry a query (`https://hooks.example/bursar?team=a`), kept as part of
    /// its own path ([`Url::own_path`]).
    pub fn parse_with_query(url: &str) -> Result<Url, UrlError> {
        Url::parse_inner(url, true)
    }

    fn parse_inner(url: &str, query: bool) -> Result<Url, UrlError> {
        let bad = |problem| UrlError { url: url.to_owned(), problem };
        let (scheme, rest, default_port) = if let Some(r) = url.strip_prefix("http://") {
            (Scheme::Http, r, 80)
        } else if let Some(r) = url.strip_prefix("https://") {
            (Scheme::Https, r, 443)
        } else {
            return Err(bad("it must start with `http://` or `https://`"));
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(bad("it names no host"));
        }
        if authority.contains('@') {
            return Err(bad("credentials do not go in the URL: set `basic_auth` or `bearer_token_file`"));
        }
        if path.contains('#') {
            return Err(bad("it may not have a fragment (`#…`)"));
        }
        if !query && path.contains('?') {
            return Err(bad("it may not have a query (`?…`)"));
        }
        if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("its path holds a space or a control character"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| bad("an IPv6 address lacks its `]`"))?;
            if h.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(bad("the bracketed host is not an IPv6 address"));
            }
            match after.strip_prefix(':') {
                Some(p) => (h, p.parse().map_err(|_| bad("the port is not a number from 1 to 65535"))?),
                None if after.is_empty() => (h, default_port),
                None => return Err(bad("text follows the IPv6 address")),
            }
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, p.parse().map_err(|_| bad("the port is not a number from 1 to 65535"))?),
                None => (authority, default_port),
            }
        };
        if host.is_empty() {
            return Err(bad("it names no host"));
        }
        if port == 0 {
            return Err(bad("the port is not a number from 1 to 65535"));
        }
        let host_ok =
            host.contains(':') || host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
        if !host_ok {
            return Err(bad("the host holds a character a host name cannot"));
        }
        let path = match path.split_once('?') {
            Some((p, q)) => format!("{}?{q}", p.trim_end_matches('/')),
            None => path.trim_end_matches('/').to_owned(),
        };
        Ok(Url { scheme, host: host.to_ascii_lowercase(), port, path })
    }

    /// `http://addr`.
    pub fn from_addr(addr: std::net::SocketAddr) -> Url {
        Url { scheme: Scheme::Http, host: addr.ip().to_string(), port: addr.port(), path: String::new() }
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// True for `https://`.
    pub fn is_https(&self) -> bool {
        self.scheme == Scheme::Https
    }

    /// The host, without brackets for IPv6.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port (80 or 443 when the URL has none).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `host:port`, IPv6 in brackets.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The path prefix (with the query, if one was allowed), `""` when there is none.
    pub fn prefix(&self) -> &str {
        &self.path
    }

    /// `path` (empty, or starting with `/`, and may carry a query) under the prefix:
    /// `/prometheus` + `/api/v1/query?…` → `/prometheus/api/v1/query?…`. `""` is the URL's own
    /// path (what a webhook is POSTed to), `/` when it has none.
    pub fn under(&self, path: &str) -> String {
        let joined = format!("{}{path}", self.path);
        if joined.is_empty() || joined.starts_with('?') { format!("/{joined}") } else { joined }
    }

    /// The full URL of `path_and_query` as sent: `https://host[:port]/prefix/path?query` (the port
    /// left out when it is the scheme's own).
    pub fn join(&self, path_and_query: &str) -> String {
        format!("{}{path_and_query}", self.origin())
    }

    fn origin(&self) -> String {
        let (scheme, default) = match self.scheme {
            Scheme::Http => ("http", 80),
            Scheme::Https => ("https", 443),
        };
        if self.port == default {
            let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
            format!("{scheme}://{host}")
        } else {
            format!("{scheme}://{}", self.authority())
        }
    }
}

impl fmt::Display for Url {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.origin(), self.path)
    }
}

/// Percent-encodes `s` as one query component or path segment (unreserved characters stay).
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3 / 2);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
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
    fn base_urls_parse_with_a_prefix_and_default_ports() {
        let u = Url::parse("https://Mon.example/prometheus/").unwrap();
        assert_eq!((u.scheme(), u.host(), u.port(), u.prefix()), (Scheme::Https, "mon.example", 443, "/prometheus"));
        assert_eq!(u.under("/api/v1/query"), "/prometheus/api/v1/query");
        assert_eq!(u.join(&u.under("/x")), "https://mon.example/prometheus/x");
        assert_eq!(u.to_string(), "https://mon.example/prometheus");
        assert_eq!(Url::parse("https://h:8443").unwrap().to_string(), "https://h:8443");
        let p = Url::parse("http://127.0.0.1").unwrap();
        assert_eq!((p.port(), p.under("").as_str()), (80, "/"));
        let v6 = Url::parse("http://[::1]:9090").unwrap();
        assert_eq!((v6.host(), v6.authority().as_str()), ("::1", "[::1]:9090"));
        let hook = Url::parse_with_query("http://127.0.0.1:8080/hook?team=a").unwrap();
        assert_eq!(hook.under(""), "/hook?team=a");
        assert_eq!(Url::parse_with_query("http://h?x=1").unwrap().under(""), "/?x=1");
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        for (bad, says) in [
            ("ftp://x", "must start with"),
            ("x:9090", "must start with"),
            ("http://", "no host"),
            ("http://h:notaport", "port"),
            ("http://h:0", "port"),
            ("https://u:pw@h", "credentials do not go in the URL"),
            ("http://h/?q", "query"),
            ("http://h/#f", "fragment"),
            ("http://[::1", "`]`"),
            ("http://h o/", "character"),
        ] {
            let e = Url::parse(bad).unwrap_err();
            assert!(e.to_string().contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn encoding() {
        assert_eq!(encode(r#"up{job="a b"}"#), "up%7Bjob%3D%22a%20b%22%7D");
        assert_eq!(encode("1764581460.000"), "1764581460.000");
    }
}
