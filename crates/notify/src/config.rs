//! The notifier's settings: the file given to `bursar serve --notify FILE` (TOML).
//!
//! ```toml
//! public_url = "https://bursar.example.org"   # how people reach serve: the base of the action links
//!                                             # (default: http://<the address serve listens on>)
//! # key_file = "/var/lib/bursar/link.key"     # HMAC key of the links (default: <audit db>.link-key)
//! # resend = "1m"        # Alertmanager: re-send open notices this often (they lapse after 4× this)
//! # info_for = "1h"      # how long a notice that only informs (an advice, a reclaim) stays open
//! # poll = "500ms"       # how often the audit log is read for new decisions
//! # timeout = "5s"       # one delivery attempt
//! # retry = { first = "1s", max = "5m" }   # back-off while the sink is down
//! # links = false        # send no action links (answers by `bursar approve`/`reject`/`keepalive`)
//!
//! [alertmanager]        # either this …
//! url = "https://alertmanager.example:9093"
//! # ca_file = "/etc/bursar/site-ca.pem"     # the CA of its certificate (default: the system's roots)
//! # basic_auth = { username = "bursar", password_file = "/etc/bursar/am.password" }
//! # bearer_token_file = "env:AM_TOKEN"      # or a token (a file, or `env:NAME`)
//! # client_cert = "…"  client_key = "…"      # mutual TLS
//! # [webhook]           # … or a plain JSON webhook, with the same TLS and auth settings
//! # url = "https://hooks.example/bursar"
//! ```
//! See `docs/notifications.md`.

use std::path::{Path, PathBuf};

use bursar_http::{BasicAuthFile, SecretSource};
use bursar_model::Duration;
use serde::Deserialize;

/// `--notify FILE`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// The URL people reach `bursar serve` at: links are `<public_url>/act/<token>` (default: the
    /// address serve listens on, see [`NotifyConfig::listening_on`]).
    #[serde(default)]
    pub public_url: Option<String>,
    /// The HMAC key file (generated with mode 0600 when missing).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Alertmanager: how often open notices are re-sent.
    #[serde(default = "defaults::resend", with = "duration")]
    pub resend: Duration,
    /// How long a notice that only informs stays open (unless the job ends first).
    #[serde(default = "defaults::info_for", with = "duration")]
    pub info_for: Duration,
    /// How often the audit log is read.
    #[serde(default = "defaults::poll", with = "duration")]
    pub poll: Duration,
    /// One delivery attempt.
    #[serde(default = "defaults::timeout", with = "duration")]
    pub timeout: Duration,
    /// Back-off while the sink is down.
    #[serde(default)]
    pub retry: Retry,
    /// Put signed action links in notices (default). `false`: no notice carries a link, so nothing
    /// that stores or shows notices (an Alertmanager's API and UI, a chat channel's history) holds
    /// the power to act; each notice then names the command that answers it (`bursar approve JOB`).
    #[serde(default = "defaults::links")]
    pub links: bool,
    /// Send to Prometheus Alertmanager (`POST /api/v2/alerts`).
    #[serde(default)]
    pub alertmanager: Option<SinkConfig>,
    /// Send each notice as JSON to a URL.
    #[serde(default)]
    pub webhook: Option<SinkConfig>,
}

/// `[alertmanager]` or `[webhook]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    /// `http(s)://host:port[/prefix]` (Alertmanager), `http(s)://host[:port]/path[?query]` (a webhook).
    pub url: String,
    /// A PEM file of the CA(s) that sign the sink's certificate, instead of the system's roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// `{ username = "…", password_file = "…" }`: HTTP basic auth.
    #[serde(default)]
    pub basic_auth: Option<BasicAuthFile>,
    /// A file (or `env:NAME`) holding a token sent as `Authorization: Bearer …`.
    #[serde(default)]
    pub bearer_token_file: Option<SecretSource>,
    /// A PEM client certificate, for a sink that asks for one (with `client_key`).
    #[serde(default)]
    pub client_cert: Option<PathBuf>,
    /// The PEM private key of `client_cert`.
    #[serde(default)]
    pub client_key: Option<PathBuf>,
}

impl SinkConfig {
    /// The client of this sink: the URL parsed, secrets, CA file and certificate read now.
    fn client(&self, timeout: Duration, query: bool) -> Result<bursar_http::Client, String> {
        let url =
            if query { bursar_http::Url::parse_with_query(&self.url) } else { bursar_http::Url::parse(&self.url) };
        url.map_err(|e| format!("{e}\n  help: write it like `https://alertmanager.example:9093`"))?;
        let auth = match (&self.bearer_token_file, &self.basic_auth) {
            (Some(_), Some(_)) => {
                return Err(
                    "`bearer_token_file` and `basic_auth` are both set\n  help: keep the one the sink checks".into()
                );
            }
            (Some(t), None) => bursar_http::Auth::Bearer(t.read().map_err(|e| format!("`bearer_token_file`: {e}"))?),
            (None, Some(b)) => b.read().map_err(|e| format!("`basic_auth.password_file`: {e}"))?,
            (None, None) => bursar_http::Auth::None,
        };
        let identity = match (&self.client_cert, &self.client_key) {
            (Some(cert_file), Some(key_file)) => {
                Some(bursar_http::Identity { cert_file: cert_file.clone(), key_file: key_file.clone() })
            }
            (None, None) => None,
            _ => return Err("`client_cert` and `client_key` go together\n  help: set both, or neither".into()),
        };
        let timeout = std::time::Duration::from_millis(u64::try_from(timeout.millis()).unwrap_or(5_000).max(1));
        bursar_http::Client::new(bursar_http::ClientConfig {
            ca_file: self.ca_file.clone(),
            identity,
            auth,
            connect_timeout: timeout,
            timeout: Some(timeout),
            // Sinks answer with a few bytes.
            max_body: 1024 * 1024,
            keep_alive: 1,
            ..bursar_http::ClientConfig::new(self.url.clone())
        })
        .map_err(|e| e.to_string())
    }
}

/// `retry = { first = "1s", max = "5m" }`: the wait after the first failure, doubling up to `max`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retry {
    /// The first wait.
    #[serde(default = "defaults::retry_first", with = "duration")]
    pub first: Duration,
    /// The longest wait.
    #[serde(default = "defaults::retry_max", with = "duration")]
    pub max: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry { first: defaults::retry_first(), max: defaults::retry_max() }
    }
}

mod defaults {
    use bursar_model::Duration;
    pub fn links() -> bool {
        true
    }
    pub fn resend() -> Duration {
        Duration::minutes(1)
    }
    pub fn info_for() -> Duration {
        Duration::hours(1)
    }
    pub fn poll() -> Duration {
        Duration(500)
    }
    pub fn timeout() -> Duration {
        Duration::seconds(5)
    }
    pub fn retry_first() -> Duration {
        Duration::seconds(1)
    }
    pub fn retry_max() -> Duration {
        Duration::minutes(5)
    }
}

/// Durations in the file are text: `"60s"`.
mod duration {
    use bursar_model::Duration;
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        Duration::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Why the notify file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read `{path}`: {source}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not a valid notify configuration.
    #[error("`{path}`: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong, and where; with a `help:` line when one helps.
        message: String,
    },
}

/// Where notices go: the client of the sink, built from its settings.
#[derive(Debug, Clone)]
pub enum SinkKind {
    /// Prometheus Alertmanager's v2 API (under the URL's path prefix).
    Alertmanager(bursar_http::Client),
    /// A JSON webhook (POSTed to the URL itself).
    Webhook(bursar_http::Client),
}

impl NotifyConfig {
    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<NotifyConfig, ConfigError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: shown.clone(), source })?;
        let cfg: NotifyConfig = toml::from_str(&text)
            .map_err(|e| ConfigError::Invalid { path: shown.clone(), message: e.to_string().trim_end().to_owned() })?;
        cfg.checked(&shown)
    }

    /// The checks of a read configuration that serde cannot make (a `[notify]` section of the site's
    /// configuration goes through them as a file does); `shown` names where it came from.
    pub fn checked(self, shown: &str) -> Result<NotifyConfig, ConfigError> {
        let cfg = self;
        let shown = shown.to_owned();
        cfg.sink().map_err(|message| ConfigError::Invalid { path: shown.clone(), message })?;
        if let Some(url) = &cfg.public_url {
            let trimmed = url.trim_end_matches('/');
            let host = trimmed.strip_prefix("http://").or_else(|| trimmed.strip_prefix("https://"));
            if host.is_none_or(str::is_empty) {
                return Err(ConfigError::Invalid {
                    path: shown,
                    message: format!(
                        "`public_url` `{url}` is not an http(s) URL\n  help: the address people's browsers reach `bursar serve` at, e.g. `https://bursar.example.org`"
                    ),
                });
            }
        }
        for (name, d) in [("resend", cfg.resend), ("poll", cfg.poll), ("timeout", cfg.timeout)] {
            if d.millis() <= 0 {
                return Err(ConfigError::Invalid { path: shown, message: format!("`{name}` must be positive") });
            }
        }
        Ok(cfg)
    }

    /// The sink: exactly one of `[alertmanager]` and `[webhook]`, its client built (its secret, CA
    /// and certificate files read).
    pub fn sink(&self) -> Result<SinkKind, String> {
        match (&self.alertmanager, &self.webhook) {
            (Some(a), None) => {
                a.client(self.timeout, false).map(SinkKind::Alertmanager).map_err(|e| format!("[alertmanager]: {e}"))
            }
            (None, Some(w)) => w.client(self.timeout, true).map(SinkKind::Webhook).map_err(|e| format!("[webhook]: {e}")),
            (Some(_), Some(_)) => Err("both `[alertmanager]` and `[webhook]` are set\n  help: keep one: Alertmanager routes to e-mail, chat and webhooks itself".into()),
            (None, None) => Err("no sink: add `[alertmanager]` with `url = \"http://host:9093\"`, or `[webhook]` with a `url`".into()),
        }
    }

    /// The key file: `key_file`, else `<audit>.link-key`.
    pub fn key_path(&self, audit: &Path) -> PathBuf {
        self.key_file.clone().unwrap_or_else(|| {
            let mut p = audit.as_os_str().to_owned();
            p.push(".link-key");
            PathBuf::from(p)
        })
    }

    /// Sets `public_url` to `http://<addr>` when the file left it out (serve calls this with the
    /// address it bound).
    pub fn listening_on(&mut self, addr: std::net::SocketAddr) {
        if self.public_url.is_none() {
            self.public_url = Some(format!("http://{addr}"));
        }
    }

    /// Sets `public_url` to `https://<addr>` when the file left it out (serve calls this with the
    /// address it bound when it terminates TLS).
    pub fn listening_on_tls(&mut self, addr: std::net::SocketAddr) {
        if self.public_url.is_none() {
            self.public_url = Some(format!("https://{addr}"));
        }
    }

    /// `public_url` without a trailing slash (empty until [`NotifyConfig::listening_on`] when the
    /// file has none).
    pub fn base_url(&self) -> &str {
        self.public_url.as_deref().unwrap_or("").trim_end_matches('/')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<NotifyConfig, ConfigError> {
        let path =
            std::env::temp_dir().join(format!("bursar-notify-config-{}-{}.toml", std::process::id(), text.len()));
        std::fs::write(&path, text).unwrap();
        let r = NotifyConfig::load(&path);
        std::fs::remove_file(&path).unwrap();
        r
    }

    #[test]
    fn a_config_names_one_sink_and_a_public_url() {
        let c = load("public_url = \"http://b:7878/\"\nresend = \"30s\"\n[alertmanager]\nurl = \"http://am:9093\"\n")
            .unwrap();
        assert_eq!(c.base_url(), "http://b:7878");
        assert_eq!(c.resend, Duration::seconds(30));
        assert!(matches!(c.sink(), Ok(SinkKind::Alertmanager(_))));
        assert_eq!(c.key_path(Path::new("/x/audit.db")), PathBuf::from("/x/audit.db.link-key"));
        let both =
            load("public_url = \"http://b\"\n[alertmanager]\nurl = \"http://a\"\n[webhook]\nurl = \"http://w\"\n");
        assert!(both.unwrap_err().to_string().contains("both"));
        let none = load("public_url = \"http://b\"\n");
        assert!(none.unwrap_err().to_string().contains("no sink"));
        let mut default = load("[webhook]\nurl = \"http://w\"\n").unwrap();
        default.listening_on("127.0.0.1:7878".parse().unwrap());
        assert_eq!(default.base_url(), "http://127.0.0.1:7878");
        let tls = load("public_url = \"http://b\"\n[webhook]\nurl = \"https://w/hook?team=a\"\n").unwrap();
        assert!(matches!(tls.sink(), Ok(SinkKind::Webhook(_))));
        let inline = load("[webhook]\nurl = \"https://u:pw@w\"\n");
        assert!(inline.unwrap_err().to_string().contains("credentials do not go in the URL"));
        let missing = load(
            "[alertmanager]\nurl = \"https://am\"\nbasic_auth = { username = \"u\", password_file = \"/nonexistent/pw\" }\n",
        );
        let missing = missing.unwrap_err().to_string();
        assert!(
            missing
                .contains("[alertmanager]: `basic_auth.password_file`: cannot read the secret file `/nonexistent/pw`"),
            "{missing}"
        );
        let bad_source = load("[webhook]\nurl = \"https://w\"\nbearer_token_file = \"env:\"\n");
        let bad_source = bad_source.unwrap_err().to_string();
        assert!(bad_source.contains("line 3") && bad_source.contains("`env:` is not a file path"), "{bad_source}");
        let half = load("[webhook]\nurl = \"https://w\"\nclient_cert = \"/c.pem\"\n");
        assert!(half.unwrap_err().to_string().contains("go together"));
        let typo = load("public_url = \"http://b\"\nresnd = \"1m\"\n[webhook]\nurl = \"http://w\"\n");
        assert!(typo.unwrap_err().to_string().contains("resnd"));
        let bad_url = load("public_url = \"bursar\"\n[webhook]\nurl = \"http://w\"\n");
        assert!(bad_url.unwrap_err().to_string().contains("public_url"));
    }
}
