//! The source: queries Prometheus at an evaluation time and hands back the samples, the error if
//! there was one, and what it counted. Blocking I/O: `serve` runs it on a blocking thread.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration as StdDuration;

use bursar_http::Request;

use bursar_model::{Event, Timestamp};

use crate::aggregate::{self, Answers, Skip};
use crate::config::{Config, ConfigError};
use crate::counters::Counters;
use crate::jobs::Jobs;
use crate::promql::{self, AnswerError};
use crate::schedule::Schedule;

/// Why a poll produced nothing. Every variant means "no data", never "idle".
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    /// No connection, or it broke or timed out.
    #[error("cannot reach prometheus at `{server}`: {source}")]
    Unreachable {
        /// The configured server.
        server: String,
        /// The transport's error (it names the URL and what to check).
        source: bursar_http::Error,
    },
    /// TLS failed: the server's certificate is not trusted, or the server refused the handshake.
    #[error("prometheus at `{server}`: {source}")]
    Tls {
        /// The configured server.
        server: String,
        /// The transport's error, with what to do.
        source: bursar_http::Error,
    },
    /// Prometheus answered with an HTTP error status.
    #[error("prometheus at `{server}` answered HTTP {status} to `{query}`: {message}")]
    Status {
        /// The configured server.
        server: String,
        /// The status code.
        status: u16,
        /// The query sent.
        query: String,
        /// Prometheus's error message, or the start of the body.
        message: String,
    },
    /// The answer was not a readable instant vector, or reported an error.
    #[error("prometheus at `{server}` gave no usable answer to `{query}`: {source}")]
    Answer {
        /// The configured server.
        server: String,
        /// The query sent.
        query: String,
        /// What was wrong.
        source: AnswerError,
    },
}

impl PollError {
    /// What to do about it.
    pub fn help(&self) -> &'static str {
        match self {
            PollError::Unreachable { .. } => {
                "check that Prometheus runs and that `server` names it; the evaluation time is retried on the next poll"
            }
            PollError::Tls { .. } => {
                "fix the TLS settings as the message says (`ca_file`, `client_cert`); retried on the next poll"
            }
            PollError::Status { status: 401, .. } => {
                "Prometheus refused the credentials: check `basic_auth` (its `username` and the password in `password_file`) or `bearer_token_file`"
            }
            PollError::Status { status: 403, .. } => {
                "Prometheus accepted the credentials but does not allow this query"
            }
            PollError::Status { status: 400, message, .. } if message.contains("HTTPS server") => {
                "this Prometheus serves TLS: write `server` with `https://`"
            }
            PollError::Status { status: 400 | 422, .. } | PollError::Answer { source: AnswerError::Api { .. }, .. } => {
                "the query was refused: check `metrics`, `attribution.labels` and `matchers`"
            }
            PollError::Status { .. } => {
                "Prometheus is overloaded or restarting; the evaluation time is retried on the next poll"
            }
            PollError::Answer { .. } => "`server` may point at something other than Prometheus's HTTP API",
        }
    }
}

/// The outcome of one evaluation time.
#[derive(Debug)]
pub struct Poll {
    /// The evaluation time.
    pub at: Timestamp,
    /// The `job.sample` events, each with time `at` and an id made from job and `at`.
    pub events: Vec<Event>,
    /// Why there are no events, if the poll failed.
    pub error: Option<PollError>,
    /// What this poll counted (already added to [`Source::counters`]).
    pub delta: Counters,
    /// The running jobs that got no sample, and why (empty when the poll failed).
    pub skipped: Vec<(String, Skip)>,
}

impl Poll {
    /// True when Prometheus answered every query (the evaluation time is done, even with no sample).
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }
}

/// The outcome of [`Source::catch_up`].
#[derive(Debug)]
pub struct CatchUp {
    /// One poll per evaluation time tried, oldest first; only the last may have failed.
    pub polls: Vec<Poll>,
    /// The new resume point: the last evaluation time that succeeded (or the old one).
    pub resume: Option<Timestamp>,
}

/// A utilisation source over one Prometheus server.
#[derive(Debug)]
pub struct Source {
    config: Config,
    http: bursar_http::Client,
    counters: Counters,
}

fn api_time(t: Timestamp) -> String {
    format!("{}.{:03}", t.millis().div_euclid(1000), t.millis().rem_euclid(1000))
}

fn excerpt(body: &[u8]) -> String {
    // Prometheus sends its JSON error body with 4xx/5xx answers.
    if let Err(AnswerError::Api { error_type, error }) = promql::parse(body) {
        return format!("{error_type}: {error}");
    }
    let text = String::from_utf8_lossy(body);
    let t = text.trim();
    match t.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &t[..i]),
        None => t.to_owned(),
    }
}

impl Source {
    /// A source; the configuration is validated first, and its secret, CA and certificate files
    /// are read.
    pub fn new(config: Config) -> Result<Source, ConfigError> {
        config.validate()?;
        let http = config.http_client()?;
        Ok(Source { config, http, counters: Counters::default() })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The evaluation times of this source.
    pub fn schedule(&self) -> Schedule {
        Schedule::new(self.config.interval, self.config.lag, self.config.max_backfill)
    }

    /// Everything counted since the source was made.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The PromQL sent at each evaluation time, one per metric in use.
    pub fn queries(&self) -> Vec<String> {
        self.metrics().into_iter().map(|(_, q)| q).collect()
    }

    /// The utilisation metrics in use (`engine_active`, then `gpu_util`), each with the selector of
    /// its series (the attribution labels and matchers the polls use): a GPU without the first is
    /// read from the second, so either one's series feed the idle rule (`bursar doctor` counts both).
    pub fn utilisation_queries(&self) -> Vec<(String, String)> {
        let m = &self.config.metrics;
        let a = &self.config.attribution;
        [&m.engine_active, &m.gpu_util]
            .into_iter()
            .filter(|name| !name.is_empty())
            .map(|name| (name.clone(), promql::selector(name, &a.labels, &self.config.matchers)))
            .collect()
    }

    fn metrics(&self) -> Vec<(usize, String)> {
        let m = &self.config.metrics;
        let a = &self.config.attribution;
        [&m.engine_active, &m.gpu_util, &m.fb_used, &m.fb_free, &m.throughput, &m.progress]
            .into_iter()
            .enumerate()
            .filter(|(_, name)| !name.is_empty())
            .map(|(i, name)| (i, promql::query(name, &a.labels, &self.config.matchers)))
            .collect()
    }

    fn ask(&self, query: &str, at: Timestamp) -> Result<Vec<promql::Reading>, PollError> {
        let timeout = self.config.timeout;
        let path = format!(
            "/api/v1/query?query={}&time={}&timeout={}ms",
            bursar_http::encode(query),
            api_time(at),
            timeout.millis()
        );
        let server = &self.config.server;
        let std_timeout = StdDuration::from_millis(u64::try_from(timeout.millis()).unwrap_or(10_000));
        let req = Request::get(&path).header("accept", "application/json").timeout(Some(std_timeout));
        let answer = self.http.send(&req).map_err(|source| {
            if source.is_unreachable() {
                PollError::Unreachable { server: server.clone(), source }
            } else {
                PollError::Tls { server: server.clone(), source }
            }
        })?;
        if !(200..300).contains(&answer.status) {
            return Err(PollError::Status {
                server: server.clone(),
                status: answer.status,
                query: query.to_owned(),
                message: excerpt(&answer.body),
            });
        }
        promql::parse(&answer.body).map_err(|source| PollError::Answer {
            server: server.clone(),
            query: query.to_owned(),
            source,
        })
    }

    /// Polls evaluation time `at`: one query per metric, then the samples. Any failed query fails the
    /// whole poll (no events): a partial answer could turn a missing profiling metric into a fallback
    /// that was never asked for.
    pub fn poll(&mut self, at: Timestamp, jobs: &dyn Jobs) -> Poll {
        let mut delta = Counters { polls: 1, ..Counters::default() };
        let mut answers = Answers::default();
        for (slot, query) in self.metrics() {
            delta.queries += 1;
            match self.ask(&query, at) {
                Ok(readings) => match slot {
                    0 => answers.engine_active = readings,
                    1 => answers.gpu_util = readings,
                    2 => answers.fb_used = readings,
                    3 => answers.fb_free = readings,
                    4 => answers.throughput = readings,
                    _ => answers.progress = readings,
                },
                Err(e) => {
                    match &e {
                        PollError::Unreachable { .. } => delta.poll_unreachable += 1,
                        PollError::Status { .. }
                        | PollError::Tls { .. }
                        | PollError::Answer { source: AnswerError::Api { .. }, .. } => delta.poll_error += 1,
                        PollError::Answer { .. } => delta.poll_bad_answer += 1,
                    }
                    self.counters.add(&delta);
                    return Poll { at, events: Vec::new(), error: Some(e), delta, skipped: Vec::new() };
                }
            }
        }
        let mut skipped = Vec::new();
        let events = aggregate::samples(&self.config, at, &answers, jobs, &mut delta, &mut skipped);
        self.counters.add(&delta);
        Poll { at, events, error: None, delta, skipped }
    }

    /// Polls every evaluation time due at wall time `now` after `resume`, oldest first, stopping at
    /// the first failure (it is retried next time, from the returned resume point).
    pub fn catch_up(&mut self, resume: Option<Timestamp>, now: Timestamp, jobs: &dyn Jobs) -> CatchUp {
        let due = self.schedule().due(resume, now);
        self.counters.evaluations_skipped += due.skipped;
        let mut polls = Vec::with_capacity(due.times.len());
        let mut resume = resume;
        for at in due.times {
            let p = self.poll(at, jobs);
            let ok = p.is_ok();
            if ok {
                resume = Some(at);
            }
            polls.push(p);
            if !ok {
                break;
            }
        }
        if let Some(first) = polls.first_mut() {
            first.delta.evaluations_skipped += due.skipped;
        }
        CatchUp { polls, resume }
    }
}

/// The resume point kept in a file: one RFC 3339 line, replaced atomically.
#[derive(Debug, Clone)]
pub struct ResumeFile {
    path: PathBuf,
}

impl ResumeFile {
    /// The file at `path` (it need not exist).
    pub fn new(path: impl Into<PathBuf>) -> ResumeFile {
        ResumeFile { path: path.into() }
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The stored resume point; `None` when the file does not exist.
    pub fn load(&self) -> io::Result<Option<Timestamp>> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => Timestamp::parse(text.trim())
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", self.path.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Stores `t` (write to a temporary file beside it, then rename).
    pub fn store(&self, t: Timestamp) -> io::Result<()> {
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        std::fs::write(&tmp, format!("{t}\n"))?;
        std::fs::rename(&tmp, &self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::ByJobId;

    #[test]
    fn api_times_are_seconds_with_millis() {
        assert_eq!(api_time(Timestamp(1_764_581_460_250)), "1764581460.250");
        assert_eq!(api_time(Timestamp(5)), "0.005");
    }

    #[test]
    fn an_unreachable_server_is_no_sample_and_a_counter() {
        // A port nothing listens on: bind one, then drop it.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let cfg = Config {
            server: format!("http://127.0.0.1:{port}"),
            timeout: bursar_model::Duration(500),
            ..Config::default()
        };
        let mut s = Source::new(cfg).unwrap();
        let p = s.poll(Timestamp(1_764_581_460_000), &ByJobId(|_: &str| Some(bursar_model::Gpus::whole(1))));
        assert!(p.events.is_empty());
        assert!(matches!(p.error, Some(PollError::Unreachable { .. })), "{:?}", p.error);
        assert_eq!(
            (p.delta.polls, p.delta.poll_unreachable, p.delta.queries),
            (1, 1, 1),
            "stops at the first failed query"
        );
        assert_eq!(s.counters().poll_failures(), 1);
        let c = s.catch_up(
            Some(Timestamp(1_764_581_400_000)),
            Timestamp(1_764_581_520_000),
            &ByJobId(|_: &str| Some(bursar_model::Gpus::whole(1))),
        );
        assert_eq!(c.polls.len(), 1, "stops at the first failure");
        assert_eq!(c.resume, Some(Timestamp(1_764_581_400_000)), "the resume point does not move");
        assert!(p.error.unwrap().help().contains("retried"));
    }

    #[test]
    fn queries_follow_the_config() {
        let mut cfg = Config::default();
        cfg.metrics.fb_free.clear();
        let s = Source::new(cfg).unwrap();
        let q = s.queries();
        assert_eq!(q.len(), 3);
        assert!(q[0].starts_with(r#"DCGM_FI_PROF_GR_ENGINE_ACTIVE{hpc_job!=""} or label_replace(timestamp("#));
        assert!(Source::new(Config { server: "ftp://x".into(), ..Config::default() }).is_err());
    }

    #[test]
    fn resume_file_round_trip() {
        let dir = std::env::temp_dir().join(format!("bursar-prom-resume-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = ResumeFile::new(dir.join("resume"));
        assert_eq!(f.load().unwrap(), None);
        f.store(Timestamp(1_764_581_460_000)).unwrap();
        assert_eq!(f.load().unwrap(), Some(Timestamp(1_764_581_460_000)));
        std::fs::write(f.path(), "yesterday").unwrap();
        assert!(f.load().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
