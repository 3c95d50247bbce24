//! What the source asks Prometheus and how it reads the answer: [`Config`], with the documented
//! defaults of `docs/integrations/utilisation.md`, and its validation into typed [`ConfigError`]s.
//!
//! `Config` derives `Deserialize` (every field optional, unknown fields refused, durations written as
//! `"60s"`), so `serve` can read it from whatever file or flags it chooses; [`Config::validate`] is
//! what turns it into something [`crate::Source::new`] accepts.

use std::path::PathBuf;

use bursar_http::{BasicAuthFile, SecretSource};
use bursar_model::Duration;
use serde::Deserialize;

/// The metrics read, by name. An empty name turns that metric off.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Metrics {
    /// Engine activity, a fraction 0–1 (default `DCGM_FI_PROF_GR_ENGINE_ACTIVE`, a profiling metric
    /// that also works per MIG instance). Preferred for every GPU that has it.
    pub engine_active: String,
    /// Utilisation in percent 0–100 (default `DCGM_FI_DEV_GPU_UTIL`), used for a GPU that has no
    /// `engine_active` series (consumer cards, profiling turned off).
    pub gpu_util: String,
    /// Frame buffer in use, MiB (default `DCGM_FI_DEV_FB_USED`), summed into `fb_used_mib`.
    pub fb_used: String,
    /// Frame buffer free, MiB (default `DCGM_FI_DEV_FB_FREE`); with `fb_used`, `mem_util` is
    /// used / (used + free).
    pub fb_free: String,
    /// A **job-level** gauge: the job's own rate of work in `unit` per second (e.g. tokens/s that the
    /// training loop exports), summed over the job's series (one per rank or node). Default empty:
    /// off. Its series carry the attribution labels, not GPU labels.
    pub throughput: String,
    /// A job-level counter: the job's cumulative work in `unit` (e.g. tokens so far), summed over
    /// its series, sent as `progress` (bursar turns consecutive readings into a rate). Default
    /// empty: off.
    pub progress: String,
    /// What `throughput` and `progress` count: `tokens`, `samples`, `steps` (no time base: the
    /// throughput metric is per second). Default empty: `units`.
    pub unit: String,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            engine_active: "DCGM_FI_PROF_GR_ENGINE_ACTIVE".into(),
            gpu_util: "DCGM_FI_DEV_GPU_UTIL".into(),
            fb_used: "DCGM_FI_DEV_FB_USED".into(),
            fb_free: "DCGM_FI_DEV_FB_FREE".into(),
            throughput: String::new(),
            progress: String::new(),
            unit: String::new(),
        }
    }
}

/// How a series names its job: which labels it must carry and how bursar's key is formed from them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Attribution {
    /// Labels a series must carry, non-empty, to be counted for a job (they become `label!=""`
    /// matchers in every query). Default `["hpc_job"]`, what dcgm-exporter adds from
    /// `--hpc-job-mapping-dir`.
    pub labels: Vec<String>,
    /// The job key: the text with each `{label}` replaced by the label's value. Default
    /// `"{hpc_job}"`. The caller's [`crate::Jobs`] turns the key into a bursar job.
    pub key: String,
}

impl Default for Attribution {
    fn default() -> Attribution {
        Attribution::slurm()
    }
}

impl Attribution {
    /// dcgm-exporter on Slurm nodes: `hpc_job`, the job id the mapping files hold.
    pub fn slurm() -> Attribution {
        Attribution { labels: vec!["hpc_job".into()], key: "{hpc_job}".into() }
    }

    /// dcgm-exporter on Kubernetes (`DCGM_EXPORTER_KUBERNETES=true`): `namespace/pod`.
    pub fn kubernetes() -> Attribution {
        Attribution { labels: vec!["namespace".into(), "pod".into()], key: "{namespace}/{pod}".into() }
    }

    /// The key for a series with these labels, or `None` when an attribution label is missing or
    /// empty.
    pub fn key_of<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> Option<String> {
        let mut out = String::with_capacity(self.key.len() + 16);
        let mut rest = self.key.as_str();
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let close = after.find('}')?;
            let value = label(&after[..close]).filter(|v| !v.is_empty())?;
            out.push_str(value);
            rest = &after[close + 1..];
        }
        out.push_str(rest);
        for l in &self.labels {
            label(l).filter(|v| !v.is_empty())?;
        }
        Some(out)
    }

    fn placeholders(&self) -> Result<Vec<&str>, ()> {
        let mut names = Vec::new();
        let mut rest = self.key.as_str();
        while let Some(open) = rest.find('{') {
            let after = &rest[open + 1..];
            let close = after.find('}').ok_or(())?;
            names.push(&after[..close]);
            rest = &after[close + 1..];
        }
        if rest.contains('}') {
            return Err(());
        }
        Ok(names)
    }
}

/// Everything the source needs. `Config::default()` is a complete Slurm set-up against a
/// Prometheus on `127.0.0.1:9090`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Prometheus's base URL, `http://host:port` or `https://host:port`, with an optional path
    /// prefix (`https://mon:9090/prometheus`).
    pub server: String,
    /// Refused: a token written inline. Kept only to say where it goes instead
    /// (`bearer_token_file`).
    pub bearer_token: Option<String>,
    /// A file (or `env:NAME`) holding a token sent as `Authorization: Bearer …`.
    pub bearer_token_file: Option<SecretSource>,
    /// `{ username = "…", password_file = "…" }`: HTTP basic auth (Prometheus's
    /// `--web.config.file` `basic_auth_users`).
    pub basic_auth: Option<BasicAuthFile>,
    /// A PEM file of the CA(s) that sign Prometheus's certificate, instead of the system's roots.
    pub ca_file: Option<PathBuf>,
    /// A PEM client certificate, for a Prometheus that asks for one (with `client_key`).
    pub client_cert: Option<PathBuf>,
    /// The PEM private key of `client_cert`.
    pub client_key: Option<PathBuf>,
    /// Metric names.
    pub metrics: Metrics,
    /// Job attribution.
    pub attribution: Attribution,
    /// Extra label matchers added to every selector, e.g. `cluster="gpu-a"` (comma-separated, without
    /// braces). Default none.
    pub matchers: String,
    /// Time between two evaluation times; evaluation times are multiples of it since the Unix epoch.
    /// Default `60s`.
    #[serde(with = "text_duration")]
    pub interval: Duration,
    /// How far behind the wall clock an evaluation time is queried, so every scrape up to it has been
    /// ingested and two queries of it get the same answer. Default `30s`.
    #[serde(with = "text_duration")]
    pub lag: Duration,
    /// A series whose newest sample is older than this at the evaluation time is stale: no sample for
    /// its job. Two to three scrape intervals. Default `2m`.
    #[serde(with = "text_duration")]
    pub max_age: Duration,
    /// After a restart or an outage, evaluation times missed up to this far back are polled; older
    /// ones are skipped and counted. Default `1h`.
    #[serde(with = "text_duration")]
    pub max_backfill: Duration,
    /// Timeout of one HTTP request, also sent as the query's `timeout`. Default `10s`.
    #[serde(with = "text_duration")]
    pub timeout: Duration,
    /// Prefix of event ids: `<prefix>-<job>-<evaluation time>`. Default `prom`.
    pub id_prefix: String,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            server: "http://127.0.0.1:9090".into(),
            bearer_token: None,
            bearer_token_file: None,
            basic_auth: None,
            ca_file: None,
            client_cert: None,
            client_key: None,
            metrics: Metrics::default(),
            attribution: Attribution::default(),
            matchers: String::new(),
            interval: Duration::seconds(60),
            lag: Duration::seconds(30),
            max_age: Duration::minutes(2),
            max_backfill: Duration::hours(1),
            timeout: Duration::seconds(10),
            id_prefix: "prom".into(),
        }
    }
}

/// A setting the source cannot work with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `server` is not `http(s)://host[:port][/prefix]`.
    #[error("prometheus `server`: {0}")]
    Server(bursar_http::UrlError),
    /// The credentials or TLS settings do not go together, or cannot be read.
    #[error("prometheus {0}")]
    Client(String),
    /// A metric name is not a Prometheus metric name.
    #[error("`metrics.{field}` `{name}` is not a Prometheus metric name")]
    MetricName {
        /// The field.
        field: &'static str,
        /// The value.
        name: String,
    },
    /// Neither utilisation metric is set.
    #[error("no utilisation metric: `metrics.engine_active` and `metrics.gpu_util` are both empty")]
    NoUtilisation,
    /// A label name is not a Prometheus label name.
    #[error("`attribution.labels` holds `{0}`, which is not a Prometheus label name")]
    LabelName(String),
    /// `attribution.key` is malformed or names a label not in `attribution.labels`.
    #[error("`attribution.key` `{key}` {problem}")]
    Key {
        /// The key template.
        key: String,
        /// What is wrong.
        problem: String,
    },
    /// `matchers` would break out of the selector.
    #[error("`matchers` `{0}` may not contain braces")]
    Matchers(String),
    /// A duration out of range.
    #[error("`{field}` is {value}; {expected}")]
    Duration {
        /// The field.
        field: &'static str,
        /// The value.
        value: Duration,
        /// What it must be.
        expected: &'static str,
    },
    /// `id_prefix` is empty.
    #[error("`id_prefix` is empty")]
    IdPrefix,
    /// `metrics.unit` has a time base or odd characters.
    #[error("`metrics.unit` `{0}` is not a unit of work")]
    Unit(String),
}

impl ConfigError {
    /// What to do about it.
    pub fn help(&self) -> Option<&'static str> {
        Some(match self {
            ConfigError::Server(_) => {
                "write it as `http://prometheus.example:9090` or `https://prometheus.example:9090`"
            }
            ConfigError::Client(_) => return None,
            ConfigError::MetricName { .. } => {
                "metric names match `[a-zA-Z_:][a-zA-Z0-9_:]*`; an empty name turns the metric off"
            }
            ConfigError::NoUtilisation => {
                "set `metrics.engine_active = \"DCGM_FI_PROF_GR_ENGINE_ACTIVE\"` or `metrics.gpu_util = \"DCGM_FI_DEV_GPU_UTIL\"`"
            }
            ConfigError::LabelName(_) => "label names match `[a-zA-Z_][a-zA-Z0-9_]*`",
            ConfigError::Key { .. } => {
                "write it like `\"{hpc_job}\"` or `\"{namespace}/{pod}\"`, naming only labels listed in `attribution.labels`"
            }
            ConfigError::Matchers(_) => "write matchers without braces: `cluster=\"gpu-a\",rack!=\"r9\"`",
            ConfigError::Duration { .. } => "durations are written like `\"60s\"`, `\"2m\"`, `\"1h\"`",
            ConfigError::IdPrefix => "leave it out to get `prom`",
            ConfigError::Unit(_) => {
                "name what is counted, without a time base: `tokens`, `samples`, `steps` (the throughput metric is per second)"
            }
        })
    }
}

fn metric_name_ok(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

pub(crate) fn label_name_ok(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Config {
    /// The HTTP client these settings describe: reads the secret files, the CA file and the client
    /// certificate now, so a missing or unreadable one is reported at start.
    pub fn http_client(&self) -> Result<bursar_http::Client, ConfigError> {
        let auth = match (&self.bearer_token_file, &self.basic_auth) {
            (Some(t), _) => bursar_http::Auth::Bearer(
                t.read().map_err(|e| ConfigError::Client(format!("`bearer_token_file`: {e}")))?,
            ),
            (None, Some(b)) => b.read().map_err(|e| ConfigError::Client(format!("`basic_auth.password_file`: {e}")))?,
            (None, None) => bursar_http::Auth::None,
        };
        let identity = match (&self.client_cert, &self.client_key) {
            (Some(cert_file), Some(key_file)) => {
                Some(bursar_http::Identity { cert_file: cert_file.clone(), key_file: key_file.clone() })
            }
            _ => None,
        };
        let timeout = std::time::Duration::from_millis(u64::try_from(self.timeout.millis()).unwrap_or(10_000));
        let config = bursar_http::ClientConfig {
            ca_file: self.ca_file.clone(),
            identity,
            auth,
            connect_timeout: timeout,
            timeout: Some(timeout),
            // A query over a very large cluster is a few MiB.
            max_body: 256 * 1024 * 1024,
            ..bursar_http::ClientConfig::new(self.server.clone())
        };
        bursar_http::Client::new(config).map_err(|e| ConfigError::Client(format!("`server` `{}`: {e}", self.server)))
    }

    /// Checks every field; the first problem found is returned.
    pub fn validate(&self) -> Result<(), ConfigError> {
        bursar_http::Url::parse(&self.server).map_err(ConfigError::Server)?;
        if self.bearer_token.is_some() {
            return Err(ConfigError::Client(
                "`bearer_token` holds a secret in plain text\n  help: write the token to a file readable only by bursar and set `bearer_token_file = \"/path/to/file\"` (or `\"env:VARIABLE\"`)".into(),
            ));
        }
        if self.bearer_token_file.is_some() && self.basic_auth.is_some() {
            return Err(ConfigError::Client(
                "`bearer_token_file` and `basic_auth` are both set\n  help: keep the one your Prometheus's `--web.config.file` (or its proxy) checks".into(),
            ));
        }
        if self.client_cert.is_some() != self.client_key.is_some() {
            return Err(ConfigError::Client(
                "`client_cert` and `client_key` go together\n  help: set both (the PEM certificate and its private key), or neither".into(),
            ));
        }
        let m = &self.metrics;
        for (field, name) in [
            ("engine_active", &m.engine_active),
            ("gpu_util", &m.gpu_util),
            ("fb_used", &m.fb_used),
            ("fb_free", &m.fb_free),
            ("throughput", &m.throughput),
            ("progress", &m.progress),
        ] {
            if !name.is_empty() && !metric_name_ok(name) {
                return Err(ConfigError::MetricName { field, name: name.clone() });
            }
        }
        if m.engine_active.is_empty() && m.gpu_util.is_empty() {
            return Err(ConfigError::NoUtilisation);
        }
        if m.unit.contains('/') || m.unit.chars().any(|c| c.is_control() || c == '"') {
            return Err(ConfigError::Unit(m.unit.clone()));
        }
        let a = &self.attribution;
        if a.labels.is_empty() {
            return Err(ConfigError::Key { key: a.key.clone(), problem: "has no `attribution.labels` to read".into() });
        }
        for l in &a.labels {
            if !label_name_ok(l) {
                return Err(ConfigError::LabelName(l.clone()));
            }
        }
        let names = a
            .placeholders()
            .map_err(|()| ConfigError::Key { key: a.key.clone(), problem: "has an unmatched brace".into() })?;
        if names.is_empty() {
            return Err(ConfigError::Key { key: a.key.clone(), problem: "names no label".into() });
        }
        if let Some(n) = names.iter().find(|n| !a.labels.iter().any(|l| l == *n)) {
            return Err(ConfigError::Key {
                key: a.key.clone(),
                problem: format!("names `{n}`, which is not in `attribution.labels`"),
            });
        }
        if self.matchers.contains(['{', '}']) {
            return Err(ConfigError::Matchers(self.matchers.clone()));
        }
        let second = Duration::seconds(1);
        for (field, value, ok, expected) in [
            ("interval", self.interval, self.interval >= second, "it must be at least 1s"),
            ("lag", self.lag, self.lag.millis() >= 0, "it may not be negative"),
            ("max_age", self.max_age, self.max_age >= second, "it must be at least 1s"),
            ("max_backfill", self.max_backfill, self.max_backfill.millis() >= 0, "it may not be negative"),
            ("timeout", self.timeout, self.timeout.millis() >= 100, "it must be at least 100ms"),
        ] {
            if !ok {
                return Err(ConfigError::Duration { field, value, expected });
            }
        }
        if self.id_prefix.is_empty() {
            return Err(ConfigError::IdPrefix);
        }
        Ok(())
    }
}

/// Durations in a config file are text: `"60s"`.
mod text_duration {
    use bursar_model::Duration;
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        Duration::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_documented() {
        let c = Config::default();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.metrics.engine_active, "DCGM_FI_PROF_GR_ENGINE_ACTIVE");
        assert_eq!(c.attribution.key, "{hpc_job}");
        assert_eq!(c.interval, Duration::seconds(60));
    }

    #[test]
    fn keys_are_formed_from_labels() {
        let k = Attribution::kubernetes();
        let labels = [("namespace", "ml"), ("pod", "train-0")];
        let get = |n: &str| labels.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
        assert_eq!(k.key_of(get).as_deref(), Some("ml/train-0"));
        let missing = [("namespace", "ml"), ("pod", "")];
        let get = |n: &str| missing.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
        assert_eq!(k.key_of(get), None, "an empty label attributes nothing");
        let prefixed = Attribution { labels: vec!["hpc_job".into()], key: "lab-{hpc_job}".into() };
        assert_eq!(prefixed.key_of(|n| (n == "hpc_job").then_some("17")).as_deref(), Some("lab-17"));
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = |f: &dyn Fn(&mut Config)| {
            let mut c = Config::default();
            f(&mut c);
            c.validate().err().map(|e| e.to_string()).unwrap_or_default()
        };
        assert!(bad(&|c| c.server = "ftp://x".into()).contains("must start with `http://` or `https://`"));
        assert_eq!(bad(&|c| c.server = "https://mon.example:9090/prom".into()), "");
        assert!(bad(&|c| c.bearer_token = Some("t".into())).contains("set `bearer_token_file"));
        assert!(
            bad(&|c| {
                c.bearer_token_file = Some(SecretSource::Env("T".into()));
                c.basic_auth =
                    Some(BasicAuthFile { username: "u".into(), password_file: SecretSource::Env("P".into()) });
            })
            .contains("both set")
        );
        assert!(bad(&|c| c.client_cert = Some("/c.pem".into())).contains("go together"));
        assert!(bad(&|c| c.metrics.gpu_util = "9bad".into()).contains("`metrics.gpu_util` `9bad`"));
        assert!(
            bad(&|c| {
                c.metrics.engine_active.clear();
                c.metrics.gpu_util.clear();
            })
            .contains("no utilisation metric")
        );
        assert!(bad(&|c| c.attribution.key = "{pod}".into()).contains("names `pod`"));
        assert!(bad(&|c| c.attribution.key = "{hpc_job".into()).contains("unmatched brace"));
        assert!(bad(&|c| c.attribution.labels = vec!["bad-label".into()]).contains("`bad-label`"));
        assert!(bad(&|c| c.matchers = "a=\"b\"}".into()).contains("braces"));
        assert!(bad(&|c| c.interval = Duration(10)).contains("`interval` is 10ms"));
        assert!(bad(&|c| c.id_prefix.clear()).contains("`id_prefix` is empty"));
        assert!(bad(&|c| c.metrics.throughput = "tokens per second".into()).contains("`metrics.throughput`"));
        assert!(bad(&|c| c.metrics.unit = "tokens/s".into()).contains("`metrics.unit` `tokens/s`"));
        assert!(ConfigError::Unit(String::new()).help().is_some_and(|h| h.contains("per second")));
        assert!(ConfigError::NoUtilisation.help().is_some());
    }

    #[test]
    fn reads_from_json_with_text_durations() {
        let c: Config = serde_json::from_str(
            r#"{"server":"http://mon:9090","interval":"30s","attribution":{"labels":["pod"],"key":"{pod}"}}"#,
        )
        .unwrap();
        assert_eq!(c.interval, Duration::seconds(30));
        assert_eq!(c.lag, Duration::seconds(30), "unset fields keep their defaults");
        assert_eq!(c.validate(), Ok(()));
        assert!(serde_json::from_str::<Config>(r#"{"intervl":"30s"}"#).is_err(), "unknown fields are refused");
        assert!(serde_json::from_str::<Config>(r#"{"interval":"soon"}"#).is_err());
        let tls: Config = serde_json::from_str(
            r#"{"server":"https://mon:9090","ca_file":"/etc/ca.pem","basic_auth":{"username":"u","password_file":"env:PW"}}"#,
        )
        .unwrap();
        assert_eq!(tls.validate(), Ok(()));
        assert!(
            serde_json::from_str::<Config>(r#"{"bearer_token_file":"env:"}"#).is_err(),
            "a bad source is refused where it is written"
        );
    }
}
