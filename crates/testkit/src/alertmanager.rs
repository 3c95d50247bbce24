//! A real Alertmanager (Debian's `prometheus-alertmanager` package, 0.25,
//! `/usr/bin/prometheus-alertmanager`) on a loopback port it picks, with a generated configuration
//! that sends every alert, grouped by all its labels, to one webhook, and its storage in a
//! temporary folder. Gossip is off (`--cluster.listen-address=`), so nothing binds beyond loopback.
//!
//! `group_wait` and `group_interval` are 1 s, so a test sees a notification about 1–2 s after the
//! alert is posted; `repeat_interval` is an hour, so a firing alert is not notified again within a
//! test. `$BURSAR_ALERTMANAGER` names another binary; tests call [`Alertmanager::binary`] first and
//! skip (saying so) when it is missing (`scripts/setup.sh` installs it).

use std::ffi::OsString;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::process::{Probe, Server, TempDir, free_port};

/// A running Alertmanager.
#[derive(Debug)]
pub struct Alertmanager {
    // Field order is drop order: the server stops before its folder is removed.
    server: Server,
    _dir: TempDir,
    addr: SocketAddr,
    probe: Probe,
}

impl Alertmanager {
    /// The binary: `$BURSAR_ALERTMANAGER`, else `/usr/bin/prometheus-alertmanager` if it exists.
    pub fn binary() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("BURSAR_ALERTMANAGER") {
            return Some(PathBuf::from(p));
        }
        let p = PathBuf::from("/usr/bin/prometheus-alertmanager");
        p.is_file().then_some(p)
    }

    /// Starts Alertmanager sending every notification to `webhook_url` (resolved ones too), and
    /// waits until it answers `/-/ready`.
    pub fn start(webhook_url: &str) -> io::Result<Alertmanager> {
        Alertmanager::start_with(webhook_url, Probe::Plain)
    }

    /// Like [`Alertmanager::start`], serving its API over TLS with basic auth as `web` says
    /// (`--web.config.file`).
    #[cfg(feature = "tls")]
    pub fn start_tls(webhook_url: &str, web: &crate::tls::WebConfig) -> io::Result<Alertmanager> {
        Alertmanager::start_with(webhook_url, Probe::Tls(web.clone()))
    }

    fn start_with(webhook_url: &str, probe: Probe) -> io::Result<Alertmanager> {
        let bin = Self::binary().ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no alertmanager binary"))?;
        let dir = TempDir::new("alertmanager")?;
        let yml = format!(
            "route:\n  receiver: hook\n  group_by: ['...']\n  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\n\
             receivers:\n  - name: hook\n    webhook_configs:\n      - url: \"{webhook_url}\"\n        send_resolved: true\n"
        );
        std::fs::write(dir.path().join("alertmanager.yml"), yml)?;
        let mut last = None;
        for n in 0..3 {
            let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
            let mut args: Vec<OsString> = vec![
                format!("--config.file={}", dir.path().join("alertmanager.yml").display()).into(),
                format!("--storage.path={}", dir.path().join("data").display()).into(),
                format!("--web.listen-address={addr}").into(),
                "--cluster.listen-address=".into(),
                "--log.level=warn".into(),
            ];
            args.extend(probe.web_config_arg());
            let mut server =
                Server::start("alertmanager", &bin, &args, &dir.path().join(format!("alertmanager-{n}.log")))?;
            match server.wait_until("ready", Duration::from_secs(30), || {
                probe.get(addr, "/-/ready").map(|(status, _)| status == 200).unwrap_or(false)
            }) {
                Ok(()) => return Ok(Alertmanager { server, _dir: dir, addr, probe }),
                Err(e) if e.to_string().contains("address already in use") => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("alertmanager did not start")))
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://127.0.0.1:PORT` (`https://` with TLS).
    pub fn url(&self) -> String {
        format!("{}://{}", self.probe.scheme(), self.addr)
    }

    /// `GET /api/v2/alerts`: the alerts it holds that have not ended, as JSON text.
    pub fn alerts(&self) -> io::Result<String> {
        let (status, body) = self.probe.get(self.addr, "/api/v2/alerts")?;
        if status != 200 {
            return Err(io::Error::other(format!("alertmanager answered {status}: {body}")));
        }
        Ok(body)
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        self.server.log()
    }
}
