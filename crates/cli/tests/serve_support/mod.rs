//! Shared helpers of the CLI's integration tests (`bursar` and the repository's root for any of them;
//! the rest for the `serve_*` ones): start the real `bursar serve` binary on
//! `127.0.0.1:0` with a real policy directory and a real SQLite audit file, talk to it over real
//! sockets, stop it with SIGTERM or SIGKILL.

#![allow(dead_code, unused_imports)]
#![expect(clippy::unwrap_used, clippy::panic, reason = "test helpers: a failure should stop the test with its message")]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub use bursar_client::{Conn, LineStream, Response};
use serde_json::Value;

/// The repository's root (the example policies, `tests/`, `docs/`).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `bursar args…`, run to its end.
pub fn bursar(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bursar")).args(args).output().unwrap()
}

/// `bursar eval --allow-empty --policies DIR/policies --events - --audit DIR/r.db` with `events` on its
/// stdin, checked to succeed: the report tests' way to fill a log.
pub fn eval_into(dir: &Path, events: &[u8]) {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .args(["eval", "--policies"])
        .arg(dir.join("policies"))
        .args(["--allow-empty", "--events", "-", "--audit"])
        .arg(dir.join("r.db"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.as_mut().unwrap().write_all(events).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A scratch directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("bursar-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(dir.join("policies")).unwrap();
        Scratch(dir)
    }

    pub fn policies(&self) -> PathBuf {
        self.0.join("policies")
    }

    /// A file of the scratch directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn audit(&self) -> PathBuf {
        self.0.join("audit.db")
    }

    /// Writes a policy file the way an editor that saves by rename does: a temporary file, then a rename.
    pub fn write_policy(&self, name: &str, text: &str) {
        let tmp = self.policies().join(format!(".{name}.swp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.policies().join(name)).unwrap();
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `bursar serve`.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub log: PathBuf,
    pub token: Option<String>,
    /// Set when serve was started over TLS: the CA file its certificate chains to.
    pub ca_file: Option<PathBuf>,
    /// The client certificate the helpers present over TLS, if any.
    pub identity: Option<bursar_http::Identity>,
}

/// Event time now, RFC 3339.
pub fn now() -> String {
    bursar_model::Timestamp(wall_ms()).to_string()
}

fn dir_is_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).map(|mut d| d.next().is_none()).unwrap_or(true)
}

/// A loopback port free right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

pub fn wall_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A `job.submitted` line.
pub fn submit(id: &str, job: &str, project: &str, gpus: u32, hours: f64) -> String {
    format!(
        r#"{{"id":"{id}","time":"{}","type":"job.submitted","job":{{"id":"{job}","project":"{project}","user":"alice","gpus":{gpus},"requested_hours":{hours},"ready":{{"image":true,"data":true,"script":true}}}}}}"#,
        now()
    )
}

/// Any other event line about a job.
pub fn job_event(id: &str, kind: &str, job: &str, extra: &str) -> String {
    format!(r#"{{"id":"{id}","time":"{}","type":"{kind}","job_id":"{job}"{extra}}}"#, now())
}

impl Server {
    /// Starts the binary and waits until `/healthz` answers.
    pub fn start(scratch: &Scratch, extra: &[&str]) -> Server {
        Self::try_start(scratch, extra).unwrap_or_else(|log| panic!("bursar serve did not start:\n{log}"))
    }

    /// Starts the binary with its audit log at `audit` (rather than in the scratch directory).
    pub fn start_with_audit(scratch: &Scratch, audit: &Path, extra: &[&str]) -> Server {
        Self::try_start_at(scratch, audit, extra).unwrap_or_else(|log| panic!("bursar serve did not start:\n{log}"))
    }

    /// Starts the binary with its audit log at `audit`; on failure returns its log.
    pub fn try_start_with_audit(scratch: &Scratch, audit: &Path, extra: &[&str]) -> Result<Server, String> {
        Self::try_start_at(scratch, audit, extra)
    }

    /// Starts the binary; on failure returns its log.
    pub fn try_start(scratch: &Scratch, extra: &[&str]) -> Result<Server, String> {
        Self::try_start_at(scratch, &scratch.audit(), extra)
    }

    /// Starts the binary over TLS (`extra` holds `--tls-cert` and `--tls-key`); the helpers then
    /// talk https, trusting `ca_file`.
    pub fn start_https(
        scratch: &Scratch,
        ca_file: &Path,
        identity: Option<bursar_http::Identity>,
        extra: &[&str],
    ) -> Server {
        Self::try_start_inner(scratch, &scratch.audit(), extra, Some((ca_file.to_owned(), identity)))
            .unwrap_or_else(|log| panic!("bursar serve did not start:\n{log}"))
    }

    fn try_start_at(scratch: &Scratch, audit: &Path, extra: &[&str]) -> Result<Server, String> {
        Self::try_start_inner(scratch, audit, extra, None)
    }

    fn try_start_inner(
        scratch: &Scratch,
        audit: &Path,
        extra: &[&str],
        tls: Option<(PathBuf, Option<bursar_http::Identity>)>,
    ) -> Result<Server, String> {
        let (ca_file, identity) = tls.map_or((None, None), |(c, i)| (Some(c), i));
        let port_file = scratch.0.join("port");
        let _ = std::fs::remove_file(&port_file);
        let n = std::fs::read_dir(&scratch.0).map(|d| d.count()).unwrap_or(0);
        let log = scratch.0.join(format!("serve-{n}.log"));
        // `--token T` in a test stands for a token file holding T (serve takes no secret on its
        // command line).
        let token = extra.iter().position(|a| *a == "--token").and_then(|i| extra.get(i + 1)).map(|s| s.to_string());
        let token_file = scratch.0.join("token");
        let mut args: Vec<String> = Vec::new();
        let mut it = extra.iter();
        while let Some(a) = it.next() {
            if *a == "--token" {
                let t = it.next().copied().unwrap_or_default();
                std::fs::write(&token_file, format!("{t}\n")).unwrap();
                args.push("--token-file".into());
                args.push(token_file.display().to_string());
            } else {
                args.push((*a).to_owned());
            }
        }
        let child = Command::new(env!("CARGO_BIN_EXE_bursar"))
            .arg("serve")
            .arg("--policies")
            .arg(scratch.policies())
            .arg("--audit")
            .arg(audit)
            .args(["--listen", "127.0.0.1:0", "--log-level", "debug", "--port-file"])
            .arg(&port_file)
            .args(&args)
            // These tests drive serve's mechanics, most with no policy at all: say so (an empty
            // directory is refused otherwise, tests/hardening.rs pins that).
            .args(dir_is_empty(&scratch.policies()).then_some("--allow-empty"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut server = Server { child, addr: "127.0.0.1:1".parse().unwrap(), log, token, ca_file, identity };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(_)) = server.child.try_wait() {
                return Err(server.log_text());
            }
            if let Some(port) = std::fs::read_to_string(&port_file).ok().and_then(|s| s.trim().parse::<u16>().ok()) {
                server.addr = SocketAddr::from(([127, 0, 0, 1], port));
                if server.get("/healthz").is_ok_and(|r| r.status == 200) {
                    // /healthz answers as soon as the socket accepts; wait for the API (policies compiled).
                    // (A server with principals answers 401 or 403 to a test that has not said who it is.)
                    if server.get("/v1/policies").is_ok_and(|r| matches!(r.status, 200 | 401 | 403)) {
                        return Ok(server);
                    }
                }
            }
            if Instant::now() > deadline {
                return Err(server.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `https://127.0.0.1:PORT` over TLS, else `http://…`.
    pub fn url(&self) -> String {
        let scheme = if self.ca_file.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The transport of the helpers: plain, or https trusting the CA file.
    pub fn http(&self) -> bursar_http::Client {
        let auth = bursar_http::Auth::bearer(self.token.as_deref());
        match &self.ca_file {
            None => bursar_http::Client::plain(self.addr, auth, None),
            Some(ca) => bursar_http::Client::new(bursar_http::ClientConfig {
                ca_file: Some(ca.clone()),
                identity: self.identity.clone(),
                auth,
                timeout: None,
                ..bursar_http::ClientConfig::new(self.url())
            })
            .unwrap(),
        }
    }

    pub fn conn(&self) -> Conn {
        Conn::over(self.http())
    }

    pub fn get(&self, path: &str) -> std::io::Result<Response> {
        self.conn().request("GET", path, b"")
    }

    pub fn post(&self, path: &str, body: &str) -> Response {
        self.conn().request("POST", path, body.as_bytes()).unwrap()
    }

    pub fn get_json(&self, path: &str) -> Value {
        let r = self.get(path).unwrap();
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
        r.json().unwrap()
    }

    /// Every decision in the log after `after`, read with `follow=false`.
    pub fn decisions(&self, after: u64) -> Vec<Value> {
        let r = self.get(&format!("/v1/decisions?after={after}&follow=false")).unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        r.text().lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// Polls `f` until it returns `Some`, for at most `secs` seconds.
    pub fn wait_for<T>(&self, secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(v) = f() {
                return v;
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}; server log:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// SIGTERM, then wait for the exit.
    pub fn terminate(mut self) -> (ExitStatus, String) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return (st, self.log_text());
            }
            if Instant::now() > deadline {
                panic!("bursar serve did not exit after SIGTERM:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL (kill -9): no chance to clean up.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The next non-blank line of a JSON Lines stream, as JSON.
pub fn next_json(s: &mut LineStream) -> Value {
    loop {
        let line = s.next_line().unwrap().unwrap_or_else(|| panic!("the stream ended"));
        if !line.trim().is_empty() {
            return serde_json::from_str(&line).unwrap();
        }
    }
}

/// The decisions of a `/v1/events` answer.
pub fn decisions_of(r: &Response) -> Vec<Value> {
    r.json().unwrap()["decisions"].as_array().cloned().unwrap_or_default()
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}
