//! The connection and everything the cluster keeps on NATS: three streams and five key-value
//! buckets, created by the first instance and found by the others.
//!
//! | name | kind | subjects / keys | what |
//! |---|---|---|---|
//! | `BURSAR_EVENTS` | stream | `bursar.events.<p>` | producers' events, de-duplicated by `Nats-Msg-Id` = event id |
//! | `BURSAR_JOURNAL` | stream | `bursar.journal.<p>` | owners' group commits: the decisions stream |
//! | `BURSAR_SNAPSHOTS` | stream | `bursar.snapshots.<p>` | snapshot chunks |
//! | `bursar_meta` | bucket | `partitions` | the partition count, written once |
//! | `bursar_leases` | bucket | `p<n>` | who owns partition n (compare-and-set by revision) |
//! | `bursar_snapshots` | bucket | `p<n>` | where partition n's newest snapshot is |
//! | `bursar_jobs` | bucket | job id | the partition of a job, for events that name only the job |
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

/// How long [`when_formed`] waits for a JetStream cluster that is still forming.
const FORMING: Duration = Duration::from_secs(15);

/// Creates (or opens) a stream, waiting while the JetStream cluster is still forming: servers that
/// have just started answer "no suitable peers for placement" (10005), "JetStream cluster not
/// available" (10008) or not at all until enough peers have joined the metadata group to place the
/// replicas. Started together with its NATS servers, an instance waits for them instead of failing;
/// after [`FORMING`] it gives the last error.
async fn when_formed(
    js: &jetstream::Context,
    config: stream::Config,
) -> Result<stream::Stream, jetstream::context::CreateStreamError> {
    use jetstream::ErrorCode;
    use jetstream::context::CreateStreamErrorKind as Kind;
    let started = std::time::Instant::now();
    loop {
        match js.get_or_create_stream(config.clone()).await {
            Ok(s) => return Ok(s),
            Err(e) => {
                let forming = match e.kind() {
                    Kind::JetStream(j) => {
                        j.error_code() == ErrorCode::CLUSTER_NO_PEERS
                            || j.error_code() == ErrorCode::CLUSTER_NOT_AVAILABLE
                    }
                    Kind::JetStreamUnavailable => true,
                    _ => false,
                };
                if !forming || started.elapsed() >= FORMING {
                    return Err(e);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
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
        let last_error = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
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
        Self::open(client, config).await.map_err(|e| match last_error.lock().ok().and_then(|l| l.clone()) {
            Some(why) => {
                ClusterError::Nats { what: format!("connect to `{shown}`"), error: format!("{why} (then: {e})") }
            }
            None => e,
        })
    }

    /// Creates what is missing on a connected client and opens it.
    async fn open(client: async_nats::Client, config: &ClusterConfig) -> Result<Nats, ClusterError> {
        let js = jetstream::new(client.clone());
        let replicas = config.replicas.max(1);
        let events = when_formed(
            &js,
            stream::Config {
                name: EVENTS_STREAM.into(),
                subjects: vec!["bursar.events.>".into()],
                duplicate_window: config.dedupe_window,
                max_age: config.retention,
                num_replicas: replicas,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| nats_err("create the events stream")(&e))?;
        let journal = when_formed(
            &js,
            stream::Config {
                name: JOURNAL_STREAM.into(),
                subjects: vec!["bursar.journal.>".into()],
                max_age: config.retention,
                num_replicas: replicas,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| nats_err("create the journal stream")(&e))?;
        let snapshots = when_formed(
            &js,
            stream::Config {
                name: SNAPSHOTS_STREAM.into(),
                subjects: vec!["bursar.snapshots.>".into()],
                max_age: Duration::from_secs(24 * 3600),
                num_replicas: replicas,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| nats_err("create the snapshot stream")(&e))?;
        let mut buckets = Vec::new();
        for (name, history, max_age) in [
            (META_BUCKET, 1, Duration::ZERO),
            (LEASES_BUCKET, 1, Duration::ZERO),
            (POINTERS_BUCKET, 1, Duration::ZERO),
            (JOBS_BUCKET, 1, Duration::from_secs(30 * 24 * 3600)),
            (MEMBERS_BUCKET, 1, Duration::from_secs(24 * 3600)),
        ] {
            when_formed(&js, bucket_config(name, history, max_age, replicas))
                .await
                .map_err(|e| nats_err(&format!("create the `{name}` bucket"))(&e))?;
            buckets.push(js.get_key_value(name).await.map_err(|e| nats_err(&format!("open the `{name}` bucket"))(&e))?);
        }
        let mut it = buckets.into_iter();
        let (Some(meta), Some(leases), Some(pointers), Some(jobs), Some(members)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            return Err(ClusterError::Nats { what: "open the buckets".into(), error: "missing".into() });
        };
        let partitions = Self::partition_count(&meta, config.partitions).await?;
        Ok(Nats { client, js, events, journal, snapshots, leases, pointers, jobs, members, partitions })
    }

    /// The stored partition count, or `wanted` written as the count if none is stored yet.
    async fn partition_count(meta: &kv::Store, wanted: u32) -> Result<u32, ClusterError> {
        let read = |v: &[u8]| -> Result<u32, ClusterError> {
            std::str::from_utf8(v).ok().and_then(|s| s.trim().parse().ok()).filter(|n: &u32| *n > 0).ok_or_else(|| {
                ClusterError::Nats {
                    what: "read the partition count".into(),
                    error: format!("`{}` is not a partition count", String::from_utf8_lossy(v)),
                }
            })
        };
        match meta.create(PARTITIONS_KEY, wanted.to_string().into()).await {
            Ok(_) => {
                tracing::info!(partitions = wanted, "created the cluster's partitions");
                Ok(wanted)
            }
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => {
                let v =
                    meta.get(PARTITIONS_KEY).await.map_err(|e| nats_err("read the partition count")(&e))?.ok_or_else(
                        || ClusterError::Nats {
                            what: "read the partition count".into(),
                            error: "it was deleted".into(),
                        },
                    )?;
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
            Err(e) => Err(nats_err("write the partition count")(&e)),
        }
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
}
