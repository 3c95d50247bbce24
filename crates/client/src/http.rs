//! A minimal blocking HTTP/1.1 transport for talking to `bursar serve` over loopback: keep-alive
//! requests with `Content-Length` or chunked answers, and a line reader over a streamed (chunked)
//! answer. It understands exactly what the server sends; it is not a general-purpose client.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// An answer.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
}

impl Response {
    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON.
    pub fn json(&self) -> io::Result<serde_json::Value> {
        serde_json::from_slice(&self.body)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{e}: {}", self.text())))
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// A keep-alive connection.
#[derive(Debug)]
pub struct Conn {
    reader: BufReader<TcpStream>,
    addr: SocketAddr,
    token: Option<String>,
}

impl Conn {
    /// Connects to `addr`; `token` is sent as a bearer token on every request.
    pub fn connect(addr: SocketAddr, token: Option<&str>) -> io::Result<Conn> {
        let s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Conn { reader: BufReader::with_capacity(64 * 1024, s), addr, token: token.map(str::to_owned) })
    }

    /// Sets the read timeout (for streams that wait for live decisions).
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.reader.get_ref().set_read_timeout(t)
    }

    fn send_head(&mut self, method: &str, path: &str, body: &[u8], extra: &[(&str, &str)]) -> io::Result<()> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {}\r\ncontent-length: {}\r\n", self.addr, body.len());
        if let Some(t) = &self.token {
            head.push_str(&format!("authorization: Bearer {t}\r\n"));
        }
        for (k, v) in extra {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let s = self.reader.get_mut();
        let mut buf = head.into_bytes();
        buf.extend_from_slice(body);
        s.write_all(&buf)
    }

    fn read_head(&mut self) -> io::Result<(u16, Vec<(String, String)>)> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed before the answer"));
        }
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad(format!("bad status line `{}`", line.trim_end())))?;
        let mut headers = Vec::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
            }
        }
        Ok((status, headers))
    }

    /// Sends a request and reads the whole answer.
    pub fn request(&mut self, method: &str, path: &str, body: &[u8]) -> io::Result<Response> {
        self.request_with(method, path, body, &[])
    }

    /// Like [`Conn::request`] with extra headers.
    pub fn request_with(
        &mut self,
        method: &str,
        path: &str,
        body: &[u8],
        extra: &[(&str, &str)],
    ) -> io::Result<Response> {
        self.send_head(method, path, body, extra)?;
        let (status, headers) = self.read_head()?;
        let find = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let mut body = Vec::new();
        if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            Chunked { inner: &mut self.reader, left: 0, done: false }.read_to_end(&mut body)?;
        } else if let Some(n) = find("content-length").and_then(|v| v.parse::<usize>().ok()) {
            body.resize(n, 0);
            self.reader.read_exact(&mut body)?;
        } else {
            self.reader.read_to_end(&mut body)?;
        }
        Ok(Response { status, headers, body })
    }

    /// Sends a GET whose answer is a stream, and returns a line reader over it.
    pub fn stream(mut self, path: &str, extra: &[(&str, &str)]) -> io::Result<LineStream> {
        self.send_head("GET", path, b"", extra)?;
        let (status, headers) = self.read_head()?;
        Ok(LineStream { status, headers, conn: self, left: 0, done: false })
    }
}

/// Reads a chunked body.
struct Chunked<'a, R: BufRead> {
    inner: &'a mut R,
    left: usize,
    done: bool,
}

fn next_chunk<R: BufRead>(inner: &mut R) -> io::Result<usize> {
    let mut line = String::new();
    if inner.read_line(&mut line)? == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "stream ended inside a chunk header"));
    }
    let size = line.trim().split(';').next().unwrap_or("");
    usize::from_str_radix(size, 16).map_err(|_| bad(format!("bad chunk size `{}`", line.trim())))
}

impl<R: BufRead> Read for Chunked<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        if self.left == 0 {
            self.left = next_chunk(self.inner)?;
            if self.left == 0 {
                let mut crlf = String::new();
                self.inner.read_line(&mut crlf)?;
                self.done = true;
                return Ok(0);
            }
        }
        let n = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..n])?;
        self.left -= n;
        if self.left == 0 {
            let mut crlf = [0u8; 2];
            self.inner.read_exact(&mut crlf)?;
        }
        Ok(n)
    }
}

/// Lines of a streamed (chunked) answer, read as they arrive.
#[derive(Debug)]
pub struct LineStream {
    /// Status code.
    pub status: u16,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    conn: Conn,
    left: usize,
    done: bool,
}

impl LineStream {
    /// The next line (without its newline); `None` at the end of the stream.
    pub fn next_line(&mut self) -> io::Result<Option<String>> {
        let mut line = Vec::new();
        loop {
            let mut byte = [0u8; 1];
            let n = {
                let mut c = Chunked { inner: &mut self.conn.reader, left: self.left, done: self.done };
                let n = c.read(&mut byte)?;
                self.left = c.left;
                self.done = c.done;
                n
            };
            if n == 0 {
                return Ok(if line.is_empty() { None } else { Some(String::from_utf8_lossy(&line).into_owned()) });
            }
            if byte[0] == b'\n' {
                return Ok(Some(String::from_utf8_lossy(&line).into_owned()));
            }
            line.push(byte[0]);
        }
    }

    /// Sets how long [`LineStream::next_line`] waits.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.conn.set_read_timeout(t)
    }
}

/// One request on a fresh connection.
pub fn request(addr: SocketAddr, token: Option<&str>, method: &str, path: &str, body: &[u8]) -> io::Result<Response> {
    Conn::connect(addr, token)?.request(method, path, body)
}
