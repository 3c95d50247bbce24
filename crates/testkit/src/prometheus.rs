//! A real Prometheus (Debian's `prometheus` package, 2.42, `/usr/bin/prometheus`) on a loopback port
//! it picks, with a generated `prometheus.yml` (and rule files, for alerting rules) and its TSDB in a
//! temporary folder.
//!
//! `stop` and `start` again keep the folder and the port, which is how a test restarts it on the same
//! storage. `$BURSAR_PROMETHEUS` names another binary. Tests that need it call [`Prometheus::binary`]
//! first and skip (saying so) when it is missing; `scripts/setup.sh` installs it.

use std::ffi::OsString;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::process::{Probe, Server, TempDir, free_port};

/// A Prometheus server scraping static targets.
#[derive(Debug)]
pub struct Prometheus {
    // Field order is drop order: the server stops before its folder is removed.
    server: Option<Server>,
    dir: TempDir,
    addr: SocketAddr,
    starts: u32,
    probe: Probe,
}

impl Prometheus {
    /// The binary: `$BURSAR_PROMETHEUS`, else `/usr/bin/prometheus` if it exists.
    pub fn binary() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("BURSAR_PROMETHEUS") {
            return Some(PathBuf::from(p));
        }
        let p = PathBuf::from("/usr/bin/prometheus");
        p.is_file().then_some(p)
    }

    /// Starts Prometheus scraping `targets` (job `dcgm`) every `scrape_interval`, and waits until it
    /// answers `/-/ready`.
    pub fn start(targets: &[SocketAddr], scrape_interval: Duration) -> io::Result<Prometheus> {
        Prometheus::start_job(targets, scrape_interval, Probe::Plain, "dcgm", &[])
    }

    /// Like [`Prometheus::start`], serving its API over TLS with basic auth as `web` says
    /// (`--web.config.file`).
    #[cfg(feature = "tls")]
    pub fn start_tls(
        targets: &[SocketAddr],
        scrape_interval: Duration,
        web: &crate::tls::WebConfig,
    ) -> io::Result<Prometheus> {
        Prometheus::start_job(targets, scrape_interval, Probe::Tls(web.clone()), "dcgm", &[])
    }

    /// Starts Prometheus scraping `targets` as the scrape job `job` every `interval`, evaluating the
    /// rule files `rules` (copied into its folder) as often, and waits until it answers `/-/ready`.
    /// What a test of alerting rules needs: `GET /api/v1/rules` and `/api/v1/alerts` through
    /// [`Prometheus::api`].
    pub fn start_with_rules(
        job: &str,
        targets: &[SocketAddr],
        interval: Duration,
        rules: &[&Path],
    ) -> io::Result<Prometheus> {
        Prometheus::start_job(targets, interval, Probe::Plain, job, rules)
    }

    fn start_job(
        targets: &[SocketAddr],
        scrape_interval: Duration,
        probe: Probe,
        job: &str,
        rules: &[&Path],
    ) -> io::Result<Prometheus> {
        let dir = TempDir::new("prometheus")?;
        let list: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let secs = scrape_interval.as_secs_f64();
        let mut rule_files = String::new();
        for (i, r) in rules.iter().enumerate() {
            let name = format!("rules-{i}.yml");
            std::fs::copy(r, dir.path().join(&name))?;
            rule_files.push_str(&format!("  - {name}\n"));
        }
        if !rule_files.is_empty() {
            rule_files = format!("rule_files:\n{rule_files}");
        }
        let yml = format!(
            "global:\n  scrape_interval: {secs}s\n  scrape_timeout: {secs}s\n  evaluation_interval: {secs}s\n\
             {rule_files}scrape_configs:\n  - job_name: {job}\n    static_configs:\n      - targets: [{}]\n",
            list.join(", ")
        );
        std::fs::write(dir.path().join("prometheus.yml"), yml)?;
        let mut last = None;
        for _ in 0..3 {
            let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
            match launch(dir.path(), addr, 1, &probe) {
                Ok(server) => return Ok(Prometheus { server: Some(server), dir, addr, starts: 1, probe }),
                Err(e) if e.to_string().contains("address already in use") => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("prometheus did not start")))
    }

    /// Starts the server again on the same port and storage (after [`Prometheus::stop`]), and waits
    /// until it is ready.
    pub fn start_again(&mut self) -> io::Result<()> {
        if self.server.as_mut().is_some_and(Server::is_running) {
            return Ok(());
        }
        self.starts += 1;
        match launch(self.dir.path(), self.addr, self.starts, &self.probe) {
            Ok(server) => {
                self.server = Some(server);
                Ok(())
            }
            Err(e) => {
                self.server = None;
                Err(e)
            }
        }
    }

    /// Stops the server by PID (SIGTERM, then wait), keeping its storage and port.
    pub fn stop(&mut self) -> io::Result<()> {
        match self.server.as_mut() {
            Some(s) => s.stop(),
            None => Ok(()),
        }
    }

    /// The PID while it runs.
    pub fn pid(&mut self) -> Option<u32> {
        let s = self.server.as_mut()?;
        s.is_running().then(|| s.pid())
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://127.0.0.1:PORT` (`https://` with TLS).
    pub fn url(&self) -> String {
        format!("{}://{}", self.probe.scheme(), self.addr)
    }

    /// Runs an instant query now and returns the body (for waiting on a condition in a test).
    pub fn query(&self, promql: &str) -> io::Result<String> {
        let mut q = String::new();
        for b in promql.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                q.push(b as char);
            } else {
                q.push_str(&format!("%{b:02X}"));
            }
        }
        let (status, body) = self.probe.get(self.addr, &format!("/api/v1/query?query={q}"))?;
        if status != 200 {
            return Err(io::Error::other(format!("prometheus answered {status}: {body}")));
        }
        Ok(body)
    }

    /// `GET` an API path (`/api/v1/rules`, `/api/v1/alerts`) and returns the body of a 200.
    pub fn api(&self, path: &str) -> io::Result<String> {
        let (status, body) = self.probe.get(self.addr, path)?;
        if status != 200 {
            return Err(io::Error::other(format!("prometheus answered {status} to {path}: {body}")));
        }
        Ok(body)
    }

    /// The log of the current (or last) run.
    pub fn log(&self) -> String {
        self.server.as_ref().map(Server::log).unwrap_or_default()
    }
}

/// Starts Prometheus in `dir` listening on `addr`; log `prometheus-<n>.log`.
fn launch(dir: &Path, addr: SocketAddr, n: u32, probe: &Probe) -> io::Result<Server> {
    let bin = Prometheus::binary().ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no prometheus binary"))?;
    let mut args: Vec<OsString> = vec![
        format!("--config.file={}", dir.join("prometheus.yml").display()).into(),
        format!("--storage.tsdb.path={}", dir.join("tsdb").display()).into(),
        format!("--web.listen-address={addr}").into(),
        "--log.level=warn".into(),
    ];
    args.extend(probe.web_config_arg());
    let mut server = Server::start("prometheus", &bin, &args, &dir.join(format!("prometheus-{n}.log")))?;
    server.wait_until("ready", Duration::from_secs(30), || {
        probe.get(addr, "/-/ready").map(|(status, _)| status == 200).unwrap_or(false)
    })?;
    Ok(server)
}
