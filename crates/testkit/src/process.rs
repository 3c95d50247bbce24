//! A real server process for a test: started from its binary with the arguments the test gives,
//! output to a log file in the test's folder, stopped by PID on `Drop` (pass, fail or panic).
//!
//! Stopping is SIGTERM (through `kill -TERM <pid>`: the workspace forbids `unsafe`, so no `libc`),
//! a wait of up to ten seconds, then SIGKILL. A *sentinel* (`sh`, reading its stdin, a pipe from the
//! test) guards against the test process dying without unwinding (SIGKILL, `abort`): the pipe
//! closes, `read` returns, and the sentinel sends SIGTERM to the server's PID. On a normal stop the
//! sentinel is killed first, so it can never signal a PID the system has since reused.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// A loopback port free at the time of asking (bound, then released).
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A running server.
#[derive(Debug)]
pub struct Server {
    name: String,
    child: Child,
    sentinel: Option<Child>,
    log: PathBuf,
}

impl Server {
    /// Starts `program` with `args`, stdout and stderr appended to `log`.
    pub fn start(name: &str, program: &Path, args: &[OsString], log: &Path) -> io::Result<Server> {
        let out = File::options().create(true).append(true).open(log)?;
        let err = out.try_clone()?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot start {name} ({}): {e}", program.display())))?;
        let pid = child.id().to_string();
        let sentinel = Command::new("sh")
            .args(["-c", "read _; kill -TERM \"$1\" 2>/dev/null", "sentinel", &pid])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok();
        Ok(Server { name: name.to_owned(), child, sentinel, log: log.to_owned() })
    }

    /// The server's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The log so far (lossy).
    pub fn log(&self) -> String {
        let mut s = Vec::new();
        let _ = File::open(&self.log).and_then(|mut f| f.read_to_end(&mut s));
        String::from_utf8_lossy(&s).into_owned()
    }

    /// The last `n` lines of the log, for error messages.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Waits until `ready()` is true, failing early (with the log) if the process exits.
    pub fn wait_until(&mut self, what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if ready() {
                return Ok(());
            }
            if !self.is_running() {
                return Err(io::Error::other(format!(
                    "{} exited before {what}; its log:\n{}",
                    self.name,
                    self.log_tail(20)
                )));
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} not {what} after {timeout:?}; its log:\n{}", self.name, self.log_tail(20)),
                ));
            }
            sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server by PID: SIGTERM, up to ten seconds, then SIGKILL. Idempotent.
    pub fn stop(&mut self) -> io::Result<()> {
        if let Some(mut s) = self.sentinel.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
        if !self.is_running() {
            return Ok(());
        }
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                return Ok(());
            }
            sleep(Duration::from_millis(20));
        }
        self.child.kill()?;
        self.child.wait().map(|_| ())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// A folder for one test's files, removed on `Drop` unless `BURSAR_KEEP_TEST_DIRS` is set.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `$TMPDIR/bursar-<name>-<pid>-<n>`.
    pub fn new(name: &str) -> io::Result<TempDir> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("bursar-{name}-{}-{n}", std::process::id()));
        if path.exists() {
            std::fs::remove_dir_all(&path)?;
        }
        std::fs::create_dir_all(&path)?;
        Ok(TempDir { path })
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A `TempDir` is used as the path it holds (`dir.join("a.toml")`, `&dir` where a `&Path` goes).
impl std::ops::Deref for TempDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TempDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("BURSAR_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// How a launcher reaches the server it started: plain HTTP, or (feature `tls`) TLS with basic auth.
#[derive(Debug, Clone, Default)]
pub enum Probe {
    /// Plain HTTP.
    #[default]
    Plain,
    /// TLS trusting the web config's CA, with its user and password.
    #[cfg(feature = "tls")]
    Tls(crate::tls::WebConfig),
}

impl Probe {
    /// One GET: status and body.
    pub fn get(&self, addr: SocketAddr, path: &str) -> io::Result<(u16, String)> {
        match self {
            Probe::Plain => http_get(addr, path),
            #[cfg(feature = "tls")]
            Probe::Tls(w) => crate::tls::https_get(addr, &w.ca_pem, path, Some((&w.user, &w.password))),
        }
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &'static str {
        match self {
            Probe::Plain => "http",
            #[cfg(feature = "tls")]
            Probe::Tls(_) => "https",
        }
    }

    /// The `--web.config.file=` argument, if any.
    pub fn web_config_arg(&self) -> Option<OsString> {
        match self {
            Probe::Plain => None,
            #[cfg(feature = "tls")]
            Probe::Tls(w) => Some(format!("--web.config.file={}", w.path.display()).into()),
        }
    }
}

/// One HTTP/1.1 request as the stand-in servers read it: request line, headers, `content-length` body.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// The request target: path and query.
    pub target: String,
    /// The headers, names lowercased, values trimmed.
    pub headers: Vec<(String, String)>,
    /// The body (`content-length` bytes; none without it).
    pub body: Vec<u8>,
}

impl Request {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// Reads one request from `r`; `None` when the connection closed before a request line.
pub fn read_request(r: &mut impl io::BufRead) -> io::Result<Option<Request>> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut it = line.split_whitespace();
    let (method, target) = (it.next().unwrap_or("").to_owned(), it.next().unwrap_or("").to_owned());
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h.trim_end().is_empty() {
            break;
        }
        if let Some((k, v)) = h.trim_end().split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let mut req = Request { method, target, headers, body: Vec::new() };
    let len = req.header("content-length").and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
    req.body = vec![0u8; len];
    r.read_exact(&mut req.body)?;
    Ok(Some(req))
}

/// One GET on a fresh connection (HTTP/1.0, so the answer is never chunked): status and body.
pub fn http_get(addr: SocketAddr, path: &str) -> io::Result<(u16, String)> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_read_whole_and_a_closed_connection_is_none() {
        let raw = b"POST /v1/x?y=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nX-Two: b : c\r\n\r\nhelloGET / HTTP/1.1\r\n\r\n";
        let mut r = io::BufReader::new(&raw[..]);
        let req = read_request(&mut r).unwrap().unwrap();
        assert_eq!((req.method.as_str(), req.target.as_str()), ("POST", "/v1/x?y=1"));
        assert_eq!(req.header("x-two"), Some("b : c"));
        assert_eq!(req.body, b"hello");
        let next = read_request(&mut r).unwrap().unwrap();
        assert_eq!((next.method.as_str(), next.body.len()), ("GET", 0));
        assert!(read_request(&mut r).unwrap().is_none());
    }

    #[test]
    fn a_server_is_stopped_by_pid_on_drop() {
        let dir = TempDir::new("process-test").unwrap();
        let mut s = Server::start("sleep", Path::new("sleep"), &["60".into()], &dir.path().join("log")).unwrap();
        let pid = s.pid();
        assert!(s.is_running());
        drop(s);
        let alive = Command::new("kill").args(["-0", &pid.to_string()]).stderr(Stdio::null()).status().unwrap();
        assert!(!alive.success(), "pid {pid} still alive after drop");
    }

    #[test]
    fn a_server_that_exits_early_is_reported_with_its_log() {
        let dir = TempDir::new("process-test").unwrap();
        let args: Vec<OsString> = vec!["-c".into(), "echo no config here; exit 3".into()];
        let mut s = Server::start("fails", Path::new("sh"), &args, &dir.path().join("log")).unwrap();
        let e = s.wait_until("ready", Duration::from_secs(5), || false).unwrap_err();
        assert!(e.to_string().contains("no config here"), "{e}");
    }

    #[test]
    fn temp_dirs_are_removed() {
        let d = TempDir::new("process-test").unwrap();
        let p = d.path().to_owned();
        assert!(p.is_dir());
        drop(d);
        assert!(!p.exists() || std::env::var_os("BURSAR_KEEP_TEST_DIRS").is_some());
    }
}
