//! The connection and everything the cluster keeps on NATS: three streams and five key-value
//! buckets, created by the first instance and found by the others.
//!
//! | name | kind | subjects / keys | what |
//! |---|---|---|---|
//! | `BURSAR_EVENTS` | stream | `bursar.events.<p>` | producers' events, de-duplicated by `Nats-Msg-Id` = event id |
//! | `BURSAR_JOURNAL` | stream | `bursar.journal.w.<writer>` | each instance's messages, its partitions' group commits (`bursar.journal.<p>` before issue 54): the decisions stream |
//! | `BURSAR_SNAPSHOTS` | stream | `bursar.snapshots.<p>` | snapshot chunks |
//! | `bursar_meta` | bucket | `partitions` | the partition count, written once |
//! | `bursar_leases` | bucket | `p<n>` | who owns partition n (compare-and-set by revision) |
//! | `bursar_snapshots` | bucket | `p<n>` | where partition n's newest snapshot is, and the journal subject its owner writes |
//! | `bursar_jobs` | bucket | job id | the partition of a job submitted through the events stream, for events that name only the job |
//! | `bursar_members` | bucket | instance | heartbeats, to share the partitions fairly |
//!
//! The buckets are made here rather than with `create_key_value` so that reads go to the stream
//! leader (`allow_direct: false`): a read right after another instance's write sees it, which the
//! direct-get path served by any replica does not promise.

use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};

use crate::partition::{
    EVENTS_STREAM, JOBS_BUCKET, JOURNAL_STREAM, LEASES_BUCKET, MEMBERS_BUCKET, META_BUCKET, PARTITIONS_KEY,
    POINTERS_BUCKET, SNAPSHOTS_STREAM,
};
use crate::{ClusterConfig, ClusterError};

/// The messages on `subject` (a wildcard allowed) of `stream` from sequence `start` on, in stream
/// order: an ordered consumer (no acks; the client recreates it if it falls behind). Every reader of
/// the cluster's streams starts here.
pub async fn read_from(
    stream: &stream::Stream,
    subject: &str,
    start: u64,
) -> Result<jetstream::consumer::pull::Ordered, String> {
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::OrderedConfig {
            filter_subject: subject.to_owned(),
            deliver_policy: jetstream::consumer::DeliverPolicy::ByStartSequence { start_sequence: start.max(1) },
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    consumer.messages().await.map_err(|e| e.to_string())
}

/// An open connection with every stream and bucket.
#[derive(Clone, Debug)]
pub struct Nats {
    /// The core client (request-reply, subscriptions).
    pub client: async_nats::Client,
    /// JetStream.
    pub js: jetstream::Context,
    /// `BURSAR_EVENTS`.
    pub events: stream::Stream,
    /// `BURSAR_JOURNAL`.
    pub journal: stream::Stream,
    /// `BURSAR_SNAPSHOTS`.
    pub snapshots: stream::Stream,
    /// Leases.
    pub leases: kv::Store,
    /// Snapshot pointers.
    pub pointers: kv::Store,
    /// Job index.
    pub jobs: kv::Store,
    /// Heartbeats.
    pub members: kv::Store,
    /// The partition count.
    pub partitions: u32,
}

fn nats_err(what: &str) -> impl Fn(&dyn std::fmt::Display) -> ClusterError + '_ {
    move |e| ClusterError::Nats { what: what.to_owned(), error: e.to_string() }
}

/// How long [`forming`] waits for a JetStream cluster that is still forming.
pub const FORMING: Duration = Duration::from_secs(15);

/// How often [`forming`] tries again.
const FORMING_RETRY: Duration = Duration::from_millis(200);

/// JetStream errors that say the request itself is wrong, which no amount of waiting for a forming
/// cluster changes: an invalid stream configuration, a name or subjects another stream already has,
/// replicas a standalone server cannot place, JetStream switched off. Reported at once.
const DEFINITE: [jetstream::ErrorCode; 8] = [
    jetstream::ErrorCode::BAD_REQUEST,
    jetstream::ErrorCode::INVALID_JSON,
    jetstream::ErrorCode::STREAM_INVALID_CONFIG,
    jetstream::ErrorCode::STREAM_NAME_EXIST,
    jetstream::ErrorCode::STREAM_SUBJECT_OVERLAP,
    jetstream::ErrorCode::STREAM_REPLICAS_NOT_SUPPORTED,
    jetstream::ErrorCode::JETSTREAM_NOT_ENABLED,
    jetstream::ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT,
];

/// Whether a JetStream API error of a start-up step may go away once the cluster has formed.
///
/// Servers that have just started give every kind of error while their peers join the metadata
/// group and the streams' replicas are placed: "no suitable peers for placement" (10005), "JetStream
/// cluster not available" (10008), "insufficient resources" (10023) before the peers have reported
/// their storage, "no responders" (the API is not subscribed yet), requests that time out (the
/// metadata leader is being elected: issue 33 saw `jetstream request timed out` on 1 start in 13),
/// a bucket's stream "not found" just after another instance created it, a key-value write whose
/// ack never came. So every error is retried except the few that say the request is wrong
/// ([`DEFINITE`]).
pub fn retryable(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut e: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(err) = e {
        if let Some(j) = err.downcast_ref::<jetstream::Error>() {
            return !DEFINITE.contains(&j.error_code());
        }
        if let Some(c) = err.downcast_ref::<jetstream::context::CreateStreamError>() {
            match c.kind() {
                jetstream::context::CreateStreamErrorKind::EmptyStreamName
                | jetstream::context::CreateStreamErrorKind::InvalidStreamName
                | jetstream::context::CreateStreamErrorKind::DomainAndExternalSet => return false,
                jetstream::context::CreateStreamErrorKind::JetStream(j) => return !DEFINITE.contains(&j.error_code()),
                _ => {}
            }
        }
        e = err.source();
    }
    true
}

/// How long a start waits for a forming cluster, and what ends the wait early.
#[derive(Debug, Clone)]
pub struct Wait {
    /// The end of the wait, shared by every step of a start (a start waits [`FORMING`] in all, not
    /// per step).
    pub deadline: std::time::Instant,
    /// The last error the servers sent on the connection (a refused login shows only there: the
    /// requests then time out, which would otherwise look like a forming cluster).
    pub server_error: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

impl Wait {
    /// A wait of `for_` from now.
    pub fn new(for_: Duration) -> Wait {
        Wait { deadline: std::time::Instant::now() + for_, server_error: Default::default() }
    }

    /// A server refused this client's login: waiting cannot help.
    fn refused(&self) -> bool {
        self.server_error.lock().ok().and_then(|e| e.clone()).is_some_and(|e| e.contains("authorization"))
    }
}

/// Runs one start-up step until it succeeds, retrying every [`FORMING_RETRY`] while its error is
/// [`retryable`], `wait`'s deadline has not passed and no server refused the login. The last error
/// is returned as it was.
pub async fn forming<T, E, F, Fut>(wait: &Wait, what: &str, mut step: F) -> Result<T, E>
where
    E: std::error::Error + 'static,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut tries = 0u32;
    loop {
        tries += 1;
        match step().await {
            Ok(v) => {
                if tries > 1 {
                    tracing::info!(what, tries, "JetStream answered; the cluster has formed");
                }
                return Ok(v);
            }
            Err(e) => {
                if !retryable(&e) || std::time::Instant::now() >= wait.deadline || wait.refused() {
                    return Err(e);
                }
                if tries == 1 {
                    tracing::info!(what, error = %e, "JetStream is not ready yet (a cluster still forming?); waiting up to {FORMING:?}");
                }
                tokio::time::sleep(FORMING_RETRY).await;
            }
        }
    }
}

fn bucket_config(bucket: &str, history: i64, max_age: Duration, replicas: usize) -> stream::Config {
    stream::Config {
        name: format!("KV_{bucket}"),
        subjects: vec![format!("$KV.{bucket}.>")],
        max_messages_per_subject: history,
        max_age,
        allow_rollup: true,
        deny_delete: true,
        deny_purge: false,
        allow_direct: false,
        discard: stream::DiscardPolicy::New,
        num_replicas: replicas,
        ..Default::default()
    }
}

impl Nats {
    /// Connects to `config.url`, creates what is missing and reads the partition count (writing
    /// `config.partitions` if this instance is the first).
    pub async fn connect(config: &ClusterConfig) -> Result<Nats, ClusterError> {
        let shown = redacted(&config.url);
        let servers: Vec<async_nats::ServerAddr> = config
            .url
            .split(',')
            .map(|s| s.trim().parse::<async_nats::ServerAddr>())
            .collect::<Result<_, _>>()
            .map_err(|e| ClusterError::Config(format!("`{shown}` is not a NATS URL list: {e}")))?;
        let mut options = async_nats::ConnectOptions::new()
            .name(format!("bursar {}", config.instance))
            .request_timeout(Some(Duration::from_secs(5)))
            .retry_on_initial_connect();
        // Credentials in the URLs (`nats://user:password@host`, or `nats://token@host`): async-nats
        // parses them but does not send them, so they are passed on here. Every URL that carries
        // some must carry the same: they name one user of one cluster.
        let mut creds = servers.iter().filter_map(|s| s.username().map(|u| (u, s.password())));
        if let Some(first) = creds.next() {
            if creds.any(|c| c != first) {
                return Err(ClusterError::Config(format!(
                    "`{shown}`: the URLs carry different credentials; give the same user (or token) in each, or in the first only"
                )));
            }
            options = match first {
                (user, Some(password)) => options.user_and_password(user.to_owned(), password.to_owned()),
                (token, None) => options.token(token.to_owned()),
            };
        }
        // The client retries in the background, so a refused login (or any error the server sends)
        // shows only as an event, and the first request then times out: keep the last such event, to
        // say why.
        let wait = Wait::new(FORMING);
        let last_error = wait.server_error.clone();
        let seen = last_error.clone();
        options = options.event_callback(move |event| {
            let seen = seen.clone();
            async move {
                if matches!(event, async_nats::Event::ClientError(_) | async_nats::Event::ServerError(_))
                    && let Ok(mut last) = seen.lock()
                {
                    *last = Some(event.to_string());
                }
            }
        });
        let client = options
            .connect(servers)
            .await
            .map_err(|e| ClusterError::Nats { what: format!("connect to `{shown}`"), error: e.to_string() })?;
        Self::open(client, config, &wait).await.map_err(|e| match last_error.lock().ok().and_then(|l| l.clone()) {
            Some(why) => {
                ClusterError::Nats { what: format!("connect to `{shown}`"), error: format!("{why} (then: {e})") }
            }
            None => e,
        })
    }

    /// Creates what is missing on a connected client and opens it. Every step waits for a forming
    /// cluster ([`forming`]), within one [`FORMING`] for the whole start.
    async fn open(client: async_nats::Client, config: &ClusterConfig, wait: &Wait) -> Result<Nats, ClusterError> {
        let js = jetstream::new(client.clone());
        let replicas = config.replicas.max(1);
        let stream_of = |what: &'static str, config: stream::Config| {
            let js = js.clone();
            let wait = wait.clone();
            async move {
                let wait = &wait;
                forming(wait, what, || js.get_or_create_stream(config.clone())).await.map_err(|e| nats_err(what)(&e))
            }
        };
        let events = stream_of(
            "create the events stream",
            stream::Config {
                name: EVENTS_STREAM.into(),
                subjects: vec!["bursar.events.>".into()],
                duplicate_window: config.dedupe_window,
                max_age: config.retention,
                num_replicas: replicas,
                ..Default::default()
            },
        )
        .await?;
        let journal = stream_of(
            "create the journal stream",
            stream::Config {
                name: JOURNAL_STREAM.into(),
                subjects: vec!["bursar.journal.>".into()],
                max_age: config.retention,
                num_replicas: replicas,
                ..Default::default()
            },
        )
        .await?;
        let snapshots = stream_of(
            "create the snapshot stream",
            stream::Config {
                name: SNAPSHOTS_STREAM.into(),
                subjects: vec!["bursar.snapshots.>".into()],
                max_age: Duration::from_secs(24 * 3600),
                num_replicas: replicas,
                ..Default::default()
            },
        )
        .await?;
        let mut buckets = Vec::new();
        for (name, history, max_age) in [
            (META_BUCKET, 1, Duration::ZERO),
            (LEASES_BUCKET, 1, Duration::ZERO),
            (POINTERS_BUCKET, 1, Duration::ZERO),
            (JOBS_BUCKET, 1, Duration::from_secs(30 * 24 * 3600)),
            (MEMBERS_BUCKET, 1, Duration::from_secs(24 * 3600)),
        ] {
            let create = format!("create the `{name}` bucket");
            let bucket = bucket_config(name, history, max_age, replicas);
            forming(wait, &create, || js.get_or_create_stream(bucket.clone()))
                .await
                .map_err(|e| nats_err(&create)(&e))?;
            let open = format!("open the `{name}` bucket");
            buckets.push(forming(wait, &open, || js.get_key_value(name)).await.map_err(|e| nats_err(&open)(&e))?);
        }
        let mut it = buckets.into_iter();
        let (Some(meta), Some(leases), Some(pointers), Some(jobs), Some(members)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            return Err(ClusterError::Nats { what: "open the buckets".into(), error: "missing".into() });
        };
        let partitions = Self::partition_count(&meta, config.partitions, wait).await?;
        Ok(Nats { client, js, events, journal, snapshots, leases, pointers, jobs, members, partitions })
    }

    /// The stored partition count, or `wanted` written as the count if none is stored yet.
    async fn partition_count(meta: &kv::Store, wanted: u32, wait: &Wait) -> Result<u32, ClusterError> {
        let read = |v: &[u8]| -> Result<u32, ClusterError> {
            std::str::from_utf8(v).ok().and_then(|s| s.trim().parse().ok()).filter(|n: &u32| *n > 0).ok_or_else(|| {
                ClusterError::Nats {
                    what: "read the partition count".into(),
                    error: format!("`{}` is not a partition count", String::from_utf8_lossy(v)),
                }
            })
        };
        let created = forming(wait, "write the partition count", || async {
            match meta.create(PARTITIONS_KEY, wanted.to_string().into()).await {
                Ok(_) => Ok(true),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(e),
            }
        })
        .await
        .map_err(|e| nats_err("write the partition count")(&e))?;
        if created {
            tracing::info!(partitions = wanted, "created the cluster's partitions");
            return Ok(wanted);
        }
        let v = forming(wait, "read the partition count", || meta.get(PARTITIONS_KEY))
            .await
            .map_err(|e| nats_err("read the partition count")(&e))?
            .ok_or_else(|| ClusterError::Nats {
                what: "read the partition count".into(),
                error: "it was deleted".into(),
            })?;
        let n = read(&v)?;
        if n != wanted {
            tracing::warn!(
                stored = n,
                asked = wanted,
                "the cluster was created with {n} partitions; --partitions {wanted} is ignored (the count is fixed at creation)"
            );
        }
        Ok(n)
    }
}

/// `urls` (a comma-separated NATS URL list) with every password or token replaced by `***`, for
/// messages and logs.
pub fn redacted(urls: &str) -> String {
    urls.split(',')
        .map(|u| {
            let u = u.trim();
            let Some((scheme, rest)) = u.split_once("://") else { return u.to_owned() };
            let authority_end = rest.find('/').unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => {
                    let (userinfo, host) = (&rest[..at], &rest[at..]);
                    let shown = match userinfo.split_once(':') {
                        Some((user, _)) => format!("{user}:***"),
                        None => "***".to_owned(),
                    };
                    format!("{scheme}://{shown}{host}")
                }
                None => u.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_and_tokens_are_not_shown() {
        assert_eq!(
            redacted("nats://alice:s3cret@127.0.0.1:4222, nats://127.0.0.1:4223,tls://tok@h:1/x@y"),
            "nats://alice:***@127.0.0.1:4222,nats://127.0.0.1:4223,tls://***@h:1/x@y"
        );
        assert_eq!(redacted("127.0.0.1:4222"), "127.0.0.1:4222");
    }

    fn js_error(code: u64) -> jetstream::Error {
        serde_json::from_value(serde_json::json!({"code": 503, "err_code": code, "description": "x"})).unwrap()
    }

    fn create_error(kind: jetstream::context::CreateStreamErrorKind) -> jetstream::context::CreateStreamError {
        jetstream::context::CreateStreamError::new(kind)
    }

    #[test]
    fn every_error_of_a_forming_cluster_is_waited_for_and_a_wrong_request_is_not() {
        use jetstream::context::CreateStreamErrorKind as K;
        // Issue 33: `jetstream request timed out` while the metadata leader was being elected.
        for kind in [K::TimedOut, K::JetStreamUnavailable, K::Response, K::NotFound, K::ResponseParse] {
            assert!(retryable(&create_error(kind)), "waited for");
        }
        // No suitable peers, cluster not available, insufficient resources, the leader not known.
        for code in [10005, 10008, 10023, 10009] {
            assert!(retryable(&create_error(K::JetStream(js_error(code)))), "{code} is waited for");
            assert!(retryable(&js_error(code)), "{code} is waited for");
        }
        for kind in [K::EmptyStreamName, K::InvalidStreamName, K::DomainAndExternalSet] {
            assert!(!retryable(&create_error(kind)));
        }
        // Invalid config, subjects overlap, JetStream off: said at once.
        for code in [10052, 10065, 10076] {
            assert!(!retryable(&create_error(K::JetStream(js_error(code)))), "{code} is not waited for");
        }
    }

    #[derive(Debug, thiserror::Error)]
    #[error("step: {0}")]
    struct StepError(#[source] jetstream::context::CreateStreamError);

    #[test]
    fn a_start_step_is_retried_until_it_succeeds_and_no_longer_than_the_deadline() {
        use jetstream::context::CreateStreamErrorKind as K;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            // Three timeouts, then an answer: the step succeeds.
            let tries = std::sync::atomic::AtomicU32::new(0);
            let wait = Wait::new(Duration::from_secs(10));
            let r = forming(&wait, "a step", || async {
                let n = tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n < 3 { Err(StepError(create_error(K::TimedOut))) } else { Ok(n) }
            })
            .await;
            assert_eq!(r.unwrap(), 3);
            // A definite error (the cause, wrapped) is returned at the first try.
            let tries = std::sync::atomic::AtomicU32::new(0);
            let r: Result<(), _> = forming(&wait, "a step", || async {
                tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Err(StepError(create_error(K::JetStream(js_error(10052)))))
            })
            .await;
            assert!(r.is_err());
            assert_eq!(tries.load(std::sync::atomic::Ordering::Relaxed), 1);
            // Past the deadline, the last error is returned.
            let wait = Wait::new(Duration::ZERO);
            let r: Result<(), _> =
                forming(&wait, "a step", || async { Err(StepError(create_error(K::TimedOut))) }).await;
            assert!(r.unwrap_err().to_string().contains("timed out"));
            // A refused login ends the wait at once.
            let wait = Wait::new(Duration::from_secs(10));
            *wait.server_error.lock().unwrap() = Some("nats: authorization violation".into());
            let tries = std::sync::atomic::AtomicU32::new(0);
            let r: Result<(), _> = forming(&wait, "a step", || async {
                tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Err(StepError(create_error(K::TimedOut)))
            })
            .await;
            assert!(r.is_err());
            assert_eq!(tries.load(std::sync::atomic::Ordering::Relaxed), 1);
        });
    }
}
