//! `bursar serve --cluster`: bursar partitioned by project and highly available on NATS JetStream.
//!
//! Several instances share a fixed number of partitions. Each partition has one owner at a time,
//! held by a lease in a key-value bucket; the owner applies the partition's events in stream order
//! through a [`bursar_session::Session`] (one engine, one writer, per partition) and journals through
//! a [`bursar_session::Journal`] that publishes each group commit to the decisions stream, fenced by
//! the subject's expected last sequence. A new owner fences the old one out, restores the latest
//! snapshot, replays the journal to its own marker and the events to the head, and only then
//! answers. An owner sends every run it sees finish to the other partitions as a `run.recorded` fact,
//! so trial history is the same everywhere. Every instance's front end publishes events, forwards admissions to owners by NATS
//! request-reply, and serves the decisions stream; every instance's audit log is a SQLite projection
//! of the decisions stream. `docs/cluster.md` has the design, the failover sequence and what is and
//! is not guaranteed.
//!
//! Layout:
//! - [`partition`]: the hash, subjects, keys, decision cursors.
//! - [`nats`]: the connection, the streams and buckets.
//! - [`wire`]: every message as a type.
//! - [`manager`]: leases, fair sharing, handover.
//! - [`owner`]: one partition's thread: takeover, apply, answer.
//! - [`journal`]: [`journal::StreamJournal`], the fenced journal.
//! - [`ledger`]: the way between project partitions and the ledger partition, which keeps the user
//!   and tag budgets spanning projects (`bursar_engine::shared` has the design).
//! - [`snapshot`]: chunked, fenced snapshots and their pointer.
//! - [`front`]: events in, admissions forwarded (straight to the owner thread when the owner is
//!   this instance), decisions out.
//! - [`forward`]: admissions forwarded to the instance that owns their partition, in batches.
//! - [`jobs`]: where each job lives, for the events that name only a job: the journal as the index.
//! - [`projection`]: the audit log as a projection of the decisions stream.
//! - [`status`]: what `/v1/cluster` and `/metrics` report.
//!
//! Boundaries: no HTTP (serve's `cluster` module routes), no policy parsing (it is handed a
//! `PolicySet`), no SQL (the audit crate writes its log).

pub mod forward;
pub mod front;
pub mod jobs;
pub mod journal;
pub mod ledger;
pub mod manager;
pub mod nats;
pub mod owner;
pub mod partition;
pub mod projection;
pub mod snapshot;
pub mod status;
pub mod wire;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bursar_engine::policy::QuotaScope;
use bursar_engine::{EngineConfig, PolicySet};
use tokio::sync::watch;

pub use front::{Front, Published, Refusal};
pub use status::Status;

/// Why the cluster could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A NATS operation failed.
    #[error("cannot {what}: {error}")]
    Nats {
        /// What was being done.
        what: String,
        /// The error.
        error: String,
    },
    /// A write was refused because a newer owner took the partition over.
    #[error("partition {partition}: fenced: {why}")]
    Fenced {
        /// The partition.
        partition: u32,
        /// The refusal.
        why: String,
    },
    /// The audit log could not be opened or written.
    #[error("{0}")]
    Audit(String),
    /// A setting is not usable.
    #[error("{0}")]
    Config(String),
}

/// Settings of a cluster instance.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// NATS server URL(s), comma-separated (`nats://127.0.0.1:4222,nats://…`).
    pub url: String,
    /// This instance's name (unique in the cluster; letters, digits, `-` and `_`).
    pub instance: String,
    /// Partitions, used only when this instance creates the cluster.
    pub partitions: u32,
    /// Stream and bucket replicas (at most the number of NATS servers).
    pub replicas: usize,
    /// Lease time: an owner that does not renew for this long loses its partitions.
    pub lease_ttl: Duration,
    /// Longest wait for an admission decision (below the Slurm hook's 2 s).
    pub admit_timeout: Duration,
    /// The events stream's `Nats-Msg-Id` duplicate window.
    pub dedupe_window: Duration,
    /// How long the events and journal streams keep messages.
    pub retention: Duration,
    /// Wall-clock tick of each partition.
    pub tick: Duration,
    /// How often a partition's changed state is snapshotted.
    pub snapshot_every: Duration,
    /// This instance's audit log (the projection).
    pub audit: PathBuf,
    /// `synchronous=FULL` for the projection's commits.
    pub durable: bool,
    /// Engine settings for a partition without a snapshot.
    pub engine: EngineConfig,
}

impl ClusterConfig {
    /// Defaults for `url`, `instance` and `audit`.
    pub fn new(url: impl Into<String>, instance: impl Into<String>, audit: impl Into<PathBuf>) -> ClusterConfig {
        ClusterConfig {
            url: url.into(),
            instance: instance.into(),
            partitions: 16,
            replicas: 3,
            lease_ttl: Duration::from_secs(2),
            admit_timeout: Duration::from_millis(1500),
            dedupe_window: Duration::from_secs(120),
            retention: Duration::from_secs(7 * 24 * 3600),
            tick: Duration::from_secs(1),
            snapshot_every: Duration::from_secs(30),
            audit: audit.into(),
            durable: true,
            engine: EngineConfig::default(),
        }
    }

    /// Refuses settings that cannot work.
    pub fn check(&self) -> Result<(), ClusterError> {
        let valid = !self.instance.is_empty()
            && self.instance.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid {
            return Err(ClusterError::Config(format!(
                "instance name `{}` is not usable: use letters, digits, `-` and `_` (it is a key in NATS)",
                self.instance
            )));
        }
        if self.partitions == 0 || self.partitions > 4096 {
            return Err(ClusterError::Config(format!(
                "--partitions {} is out of range: use 1 to 4096",
                self.partitions
            )));
        }
        if self.lease_ttl < Duration::from_millis(400) {
            return Err(ClusterError::Config("--lease-ttl must be at least 400ms".into()));
        }
        Ok(())
    }
}

/// A quota whose ledger spans partitions: `serve --cluster` checks it through the ledger partition
/// (the two-step reservation of [`bursar_engine::shared`]), one round trip more per admission it
/// applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spanning {
    /// The policy id.
    pub policy: String,
    /// Where it is defined (`file:line`).
    pub source: String,
    /// The scope, as written.
    pub scope: String,
}

impl std::fmt::Display for Spanning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: policy `{}` has a quota with `scope = \"{}\"`, which spans projects: in cluster mode the ledger partition keeps its ledgers and reserves for every project's partition, one more round trip for each admission it applies to (docs/cluster.md, \"What spans partitions\")",
            self.source, self.policy, self.scope
        )
    }
}

/// The quotas of `set` scoped by user or tag: their ledgers span projects, and so partitions.
pub fn spanning_quotas(set: &PolicySet) -> Vec<Spanning> {
    let mut out = Vec::new();
    for p in set.policies() {
        for q in p.limits().quotas {
            let scope = match &q.scope {
                QuotaScope::Project => continue,
                QuotaScope::User => "user".to_owned(),
                QuotaScope::Tag(k) => format!("tag:{k}"),
            };
            let m = p.meta();
            out.push(Spanning { policy: m.id.to_string(), source: m.source.clone(), scope });
        }
    }
    out
}

/// A running cluster instance (everything but HTTP).
#[derive(Debug)]
pub struct Cluster {
    /// The front end.
    pub front: Arc<Front>,
    /// Status and counters.
    pub status: Arc<Status>,
    shutdown: watch::Sender<bool>,
    manager: tokio::task::JoinHandle<()>,
    whereis: tokio::task::JoinHandle<()>,
    forwarded: tokio::task::JoinHandle<()>,
    projection: Option<std::thread::JoinHandle<()>>,
}

impl Cluster {
    /// Connects, creates what is missing, starts the lease manager and the audit projection. Must be
    /// called inside a multi-thread tokio runtime.
    pub async fn start(
        config: ClusterConfig,
        policies: watch::Receiver<Arc<PolicySet>>,
    ) -> Result<Cluster, ClusterError> {
        config.check()?;
        let nats = nats::Nats::connect(&config).await?;
        let status = Arc::new(Status::new(&config.instance, nats.partitions));
        let max_payload = nats.client.server_info().max_payload.max(64 * 1024);
        let rt = tokio::runtime::Handle::current();
        let durability =
            if config.durable { bursar_audit::Durability::Durable } else { bursar_audit::Durability::Fast };
        let jobs = Arc::new(jobs::JobIndex::default());
        let projection =
            projection::spawn(nats.clone(), rt, config.audit.clone(), durability, status.clone(), jobs.clone())?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let local = Arc::new(owner::LocalOwners::default());
        let whereis = tokio::spawn(jobs::answer_whereis(nats.clone(), local.clone()));
        let forwarded = tokio::spawn(forward::serve(nats.clone(), config.instance.clone(), local.clone()));
        let max_message = max_payload - max_payload / 8;
        let writer = journal::Writer::start(
            &tokio::runtime::Handle::current(),
            nats.js.clone(),
            nats.journal.clone(),
            &config.instance,
            max_message,
            status.clone(),
        );
        let manager = tokio::spawn(manager::run(
            manager::ManagerCtx {
                nats: nats.clone(),
                instance: Arc::from(config.instance.as_str()),
                ttl: config.lease_ttl,
                policies,
                settings: owner::OwnerSettings {
                    tick: config.tick,
                    snapshot_every: config.snapshot_every,
                    max_message,
                    engine: config.engine,
                    shared_ledgers: true,
                },
                status: status.clone(),
                local: local.clone(),
                writer,
            },
            shutdown_rx,
        ));
        let front = Arc::new(Front::new(nats, status.clone(), config.admit_timeout, local, jobs));
        Ok(Cluster { front, status, shutdown, manager, whereis, forwarded, projection: Some(projection) })
    }

    /// Hands every partition over (a final snapshot each, leases deleted) and stops.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        let _ = (&mut self.manager).await;
        self.whereis.abort();
        self.forwarded.abort();
        // The projection thread ends with the runtime (its consumer task is dropped then).
        drop(self.projection.take());
    }
}
