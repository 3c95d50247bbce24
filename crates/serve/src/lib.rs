//! `bursar serve`: the live engine. A long-lived process beside the scheduler that takes events over
//! HTTP, answers admissions synchronously once they are durable, streams decisions, drives timers from
//! the wall clock, reloads policies when their files change, and resumes after a restart (even a
//! `kill -9`) with the same state and no lost decision.
//!
//! Shape: one engine thread owns the [`bursar_session::Session`] — the engine and its journal, the
//! audit log's writer ([`core`]); everything else (HTTP handlers, the socket, the ticker, the
//! reloader) frames and decodes with the session crate's one decoder, sends the inputs over one
//! bounded channel and awaits the reply. The engine thread applies work in batches and flushes the
//! journal once per batch (group commit) before answering, so throughput grows with concurrency while
//! every answer is durable.
//!
//! Boundaries: no policy semantics here (the engine decides), no SQL (the audit crate stores and
//! answers typed queries), no JSON built by hand (every body is a `bursar_model::api` type), no policy
//! parsing (a [`Loader`] compiles the directory; `bursar serve` passes the same loader as the other
//! subcommands, so WebAssembly policies load here exactly as in `check` and `eval`).
//!
//! Exports: [`serve`] and its [`Config`], [`ServeError`], [`Loader`], [`Metrics`], and the modules
//! below for the binary and the benches.
//!
//! Layout:
//! - [`core`]: the engine thread, group commit, recovery from snapshot + log replay.
//! - [`http`]: routes and answers.
//! - [`auth`]: every request authenticated (before its body is read), every route's power checked,
//!   the security headers.
//! - [`csrf`]: the one layer every state-changing route a browser can reach goes through.
//! - [`budget`]: each principal's and person's writes per minute.
//! - [`gate`]: the checks of who may send an input that need the engine's state (approvers, owners,
//!   unknown jobs).
//! - [`listen`]: the accept loop: connection cap, per-address limits on open and unfinished
//!   connections, header/idle and body deadlines, early 413, TLS.
//! - [`stream`]: `GET /v1/decisions`, catch-up from the log then live.
//! - [`reload`]: watcher, debounce, off-thread compile, swap.
//! - [`socket`]: events as JSON Lines over a Unix socket.
//! - [`utilisation`], [`jobkeys`]: GPU utilisation from Prometheus (dcgm-exporter) as `job.sample`
//!   events, and the index of which running job a sample's key names.
//! - [`metrics`], [`views`]: `/metrics`; job and project views.
//! - [`people`], [`pool`], [`page`], [`notices`]: people in the loop (`docs/notifications.md`): the
//!   pool page, what waits for whom, approvals and keepalives from a terminal or a signed link, and
//!   the notifier (`--notify`).
//! - [`systemd`]: `READY=1`, `RELOADING=1`, `STOPPING=1` to a `Type=notify` unit.
//! - [`cluster`]: `serve --cluster`, one instance of a cluster on NATS JetStream (`bursar-cluster`).

pub mod api;
pub mod auth;
pub mod backend;
pub mod body;
pub mod budget;
pub mod cluster;
pub mod core;
pub mod csrf;
pub mod doors;
pub mod estimate;
pub mod gate;
pub mod jobkeys;
pub mod layers;
pub mod listen;
pub mod local;
pub mod local_api;
pub mod metrics;
pub mod notices;
pub mod page;
pub mod people;
pub mod pool;
pub mod reload;
pub mod respond;
pub mod road;
pub mod router;
pub mod socket;
pub mod stream;
pub mod systemd;
pub mod utilisation;
pub mod views;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bursar_engine::{EngineConfig, PolicySet};
use bursar_lang::Diagnostic;
use bursar_model::Timestamp;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

pub use crate::metrics::Metrics;

/// Compiles a policy directory into a set, or returns every error.
pub type Loader = Arc<dyn Fn(&Path) -> Result<PolicySet, Vec<Diagnostic>> + Send + Sync>;

/// The loader for builds without WebAssembly: TOML policies only.
pub fn toml_loader() -> Loader {
    Arc::new(|dir: &Path| bursar_loader::load_dir(dir, &bursar_loader::NoComponents))
}

/// Why the server could not start or stopped badly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A non-loopback address without principals.
    #[error(
        "refusing to listen on `{0}` without principals: every request would be unauthenticated and have every power\n  help: declare who may call in a configuration file (`--config bursar.toml`, `[[principal]]` tables; docs/security.md), or listen on 127.0.0.1"
    )]
    NeedsToken(SocketAddr),
    /// The configuration file cannot be used.
    #[error("{0}")]
    Config(String),
    /// The policies do not compile at start.
    #[error("{} error(s) in the policies in `{dir}`; not starting", .errors.len())]
    Policies {
        /// The directory.
        dir: String,
        /// Every error.
        errors: Vec<Diagnostic>,
    },
    /// The audit log could not be opened or replayed.
    #[error("{0}")]
    Audit(String),
    /// Socket, watcher or runtime trouble.
    #[error("{context}: {message}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        message: String,
    },
    /// `--cluster`: the cluster could not start (NATS unreachable, streams it cannot create).
    #[error("{0}")]
    Cluster(String),
    /// The engine thread stopped on an error (already logged).
    #[error("the engine stopped on an audit-log error; restart to resume from the log")]
    EngineFailed,
}

/// What the binary is, for `bursar_build_info` on `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BuildInfo {
    /// The package version.
    pub version: &'static str,
    /// The commit it was built from.
    pub commit: &'static str,
    /// What it was built with, comma-separated.
    pub features: String,
}

/// Server settings.
#[derive(Clone)]
pub struct Config {
    /// The policy directory.
    pub policies: PathBuf,
    /// The audit database (created if missing).
    pub audit: PathBuf,
    /// `synchronous=FULL` commits (survive power loss) rather than `NORMAL` (survive a process crash).
    pub durable: bool,
    /// Who may call and what each may do (an open authenticator, on loopback only, lets every
    /// request through with every power).
    pub auth: Arc<bursar_auth::Authenticator>,
    /// The configuration file the principals came from, reread on reload (SIGHUP, `POST
    /// /v1/reload`) so a rotated token works without a restart.
    pub config_file: Option<PathBuf>,
    /// How far ahead of the wall clock an event may be dated (`[clock] max_skew`).
    pub max_skew: bursar_model::Duration,
    /// What the binary is, for `/metrics`.
    pub build: BuildInfo,
    /// Wall-clock tick interval.
    pub tick: Duration,
    /// How often the engine state is snapshotted (when it changed).
    pub snapshot_every: Duration,
    /// Request body limit in bytes.
    pub max_body: usize,
    /// Open connections at most, per listener (the admission listener has its own).
    pub max_connections: usize,
    /// Open connections from one address at most, per listener.
    pub max_connections_per_address: usize,
    /// Connections from one address whose request head has not arrived yet, at most, per listener.
    pub max_unfinished_per_address: usize,
    /// Origins a browser may send state-changing requests from besides the server's own
    /// (`[serve] origins`, lowercased `scheme://host[:port]`).
    pub origins: Vec<String>,
    /// Time for a request's head to arrive, and for an idle keep-alive connection's next request.
    pub header_timeout: Duration,
    /// Time for a request's body to arrive.
    pub body_timeout: Duration,
    /// A second listener for the scheduler's hook: only `/v1/admit` and `/healthz`, its own connections.
    pub admit_listen: Option<SocketAddr>,
    /// Terminate TLS on every listener (`--tls-cert`, `--tls-key`, `--tls-client-ca`,
    /// `--tls-require-client-cert`); `None`: plain HTTP.
    pub tls: Option<listen::TlsConfig>,
    /// Engine queue length (requests waiting beyond it wait for room).
    pub queue: usize,
    /// Quiet time after a file change before reloading.
    pub debounce: Duration,
    /// Watch the policy directory.
    pub watch: bool,
    /// Also take events as JSON Lines on this Unix socket.
    pub socket: Option<PathBuf>,
    /// Permission bits of the socket file: who may write events (the owner and its group by default).
    pub socket_mode: u32,
    /// Engine settings for a fresh state (a restored one keeps its own).
    pub engine: EngineConfig,
    /// Compiles the policy directory.
    pub loader: Loader,
    /// Read GPU utilisation from Prometheus (`--utilisation FILE`).
    pub utilisation: Option<utilisation::UtilisationConfig>,
    /// Send notices to Alertmanager or a webhook, with action links (`--notify FILE`).
    pub notify: Option<bursar_notify::NotifyConfig>,
    /// Sign the audit log's head with this Ed25519 key and append it to this witness file (at most
    /// once a second, and at shutdown): `--signing-key`, `--witness`. The log must be on signed
    /// ground: writes no signed head covers make the start fail unless `adopt_unsigned`.
    pub witness: Option<(PathBuf, PathBuf)>,
    /// With `witness`: adopt writes no signed head covers (recorded in the log as an `adopt` anchor)
    /// instead of refusing to start: `--adopt-unsigned`.
    pub adopt_unsigned: bool,
    /// Start from a pruned log that holds no usable engine snapshot after its prune, replaying only
    /// the events after it (an operator's decision for one start: [`core::recover`]).
    pub replay_after_prune: bool,
    /// Rates for `GET /v1/report` and `GET /report` (`--prices FILE`): the billing comparison and,
    /// with `cost_per_unit=true`, the cost per unit of work.
    pub prices: Option<bursar_report::Prices>,
    /// What the pool has where no scheduler's agent reports it (the site's `[[capacity]]`): used
    /// where no `pool.inventory` names the same partition ([`estimate::EstimateInput::configured`]).
    pub capacity: Vec<bursar_model::CapacityRow>,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("policies", &self.policies)
            .field("audit", &self.audit)
            .field("durable", &self.durable)
            .field("principals", &self.auth.principals())
            .field("config_file", &self.config_file)
            .field("tick", &self.tick)
            .field("snapshot_every", &self.snapshot_every)
            .field("max_body", &self.max_body)
            .field("queue", &self.queue)
            .field("debounce", &self.debounce)
            .field("watch", &self.watch)
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Defaults for `policies` and `audit`.
    pub fn new(policies: impl Into<PathBuf>, audit: impl Into<PathBuf>) -> Config {
        Config {
            policies: policies.into(),
            audit: audit.into(),
            durable: true,
            auth: Arc::new(bursar_auth::Authenticator::open()),
            config_file: None,
            max_skew: bursar_model::Duration::minutes(5),
            build: BuildInfo::default(),
            tick: Duration::from_secs(1),
            snapshot_every: Duration::from_secs(30),
            max_body: 8 * 1024 * 1024,
            max_connections: 512,
            max_connections_per_address: DEFAULT_MAX_PER_ADDRESS,
            max_unfinished_per_address: DEFAULT_MAX_UNFINISHED_PER_ADDRESS,
            origins: Vec::new(),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            admit_listen: None,
            tls: None,
            queue: 4096,
            debounce: Duration::from_millis(100),
            watch: true,
            socket: None,
            socket_mode: 0o660,
            engine: EngineConfig::default(),
            loader: toml_loader(),
            utilisation: None,
            notify: None,
            witness: None,
            adopt_unsigned: false,
            replay_after_prune: false,
            prices: None,
            capacity: Vec::new(),
        }
    }
}

/// The default of `--max-connections-per-address`: a quarter of the default connection cap, so three
/// other addresses still find room when one takes all it may.
pub const DEFAULT_MAX_PER_ADDRESS: usize = 128;

/// The default of `--max-unfinished-per-address`: connections whose request head has not arrived
/// (a client sends its head at once; an idle keep-alive connection counts as open only).
pub const DEFAULT_MAX_UNFINISHED_PER_ADDRESS: usize = 32;

/// How long a stopping server waits for a failing audit log (a full disk) before it gives up on
/// what is not committed and exits (nothing unanswered is lost; a restart replays the log).
pub const SHUTDOWN_COMMIT_GRACE: Duration = Duration::from_secs(2);

/// Refuses a non-loopback address when the server has no principals.
pub fn check_bind(addr: SocketAddr, auth: &bursar_auth::Authenticator) -> Result<(), ServeError> {
    if addr.ip().is_loopback() || !auth.is_open() { Ok(()) } else { Err(ServeError::NeedsToken(addr)) }
}

/// The wall clock as event time.
pub fn wall_time() -> Timestamp {
    Timestamp::wall_clock()
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// For people.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

/// Sends `tracing` output to stderr at `level` (`error`, `warn`, `info`, `debug`, `trace`).
pub fn init_logging(format: LogFormat, level: tracing::Level) {
    let builder = tracing_subscriber::fmt().with_writer(std::io::stderr).with_max_level(level).with_target(false);
    let _ = match format {
        LogFormat::Human => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// Resolves on `SIGTERM` or `SIGINT`.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! {
                _ = t.recv() => tracing::info!("SIGTERM: draining"),
                _ = i.recv() => tracing::info!("SIGINT: draining"),
            }
        }
        _ => {
            tracing::warn!("cannot install signal handlers; stop with kill -9");
            std::future::pending::<()>().await;
        }
    }
}

/// What a running server reports once it stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// Event seq of the final snapshot.
    pub event_seq: u64,
}

/// Runs the server on `listener` until `shutdown` resolves, then drains: stops accepting, finishes
/// in-flight requests, ends the streams, lets the engine apply what is queued, writes a snapshot.
pub async fn serve(
    config: Config,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    serve_then(config, listener, shutdown, |_: &Ready| Ok(())).await
}

/// Where a started server listens, for [`serve_then`]'s `ready` callback.
#[derive(Debug, Clone, Copy)]
pub struct Ready {
    /// The main listener.
    pub addr: SocketAddr,
    /// The admission listener, if any.
    pub admit: Option<SocketAddr>,
}

/// Like [`serve`], calling `ready` once the policies compiled, the engine recovered and the listeners
/// are bound — and before any request is taken (where `bursar serve` writes its `--port-file`, so
/// a port file never names a server that is about to exit).
pub async fn serve_then(
    config: Config,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    ready: impl FnOnce(&Ready) -> Result<(), ServeError>,
) -> Result<(), ServeError> {
    let addr = listener
        .local_addr()
        .map_err(|e| ServeError::Io { context: "read the bound address".into(), message: e.to_string() })?;
    check_bind(addr, &config.auth)?;
    if config.auth.is_open() {
        tracing::warn!("no principals are configured: every caller on loopback has every power (docs/security.md)");
    }
    let tls = config
        .tls
        .as_ref()
        .map(listen::Tls::load)
        .transpose()
        .map_err(|e| ServeError::Io { context: "load the TLS settings".into(), message: e.to_string() })?;

    // Policies first: a server with broken policies does not start.
    let set = {
        let loader = config.loader.clone();
        let dir = config.policies.clone();
        tokio::task::spawn_blocking(move || loader(&dir))
            .await
            .map_err(|e| ServeError::Io { context: "compile the policies".into(), message: e.to_string() })?
    };
    let set =
        Arc::new(set.map_err(|errors| ServeError::Policies { dir: config.policies.display().to_string(), errors })?);

    // The audit log, and the engine rebuilt from it.
    let metrics = Arc::new(Metrics::default());
    let (decisions_tx, _) = broadcast::channel(8192);
    let (core, journal_health, health_notes) = {
        let audit = config.audit.clone();
        let durable = config.durable;
        let set = set.clone();
        let engine_config = config.engine;
        let metrics = metrics.clone();
        let decisions_tx = decisions_tx.clone();
        let utilisation_jobs = config.utilisation.as_ref().map(|u| u.jobs.clone());
        let witness = config.witness.clone();
        let adopt_unsigned = config.adopt_unsigned;
        let replay_after_prune = config.replay_after_prune;
        let auth = config.auth.clone();
        let max_skew = config.max_skew;
        tokio::task::spawn_blocking(
            move || -> Result<(core::Core, Arc<bursar_audit::Health>, Vec<String>), ServeError> {
                let durability =
                    if durable { bursar_audit::Durability::Durable } else { bursar_audit::Durability::Fast };
                let mut log =
                    bursar_audit::AuditLog::open(&audit, durability).map_err(|e| ServeError::Audit(e.to_string()))?;
                if let Some((key, file)) = &witness {
                    // Signing every commit would add the witness's fsync to each batch: once a second.
                    let key = bursar_audit::SigningKey::from_file(key).map_err(|e| ServeError::Audit(e.to_string()))?;
                    let w = bursar_audit::Witness::open(key, file).map_err(|e| ServeError::Audit(e.to_string()))?;
                    // Only over signed ground (or adopting what is not, on request): the first signature
                    // would vouch for whatever the log holds, and a restore trusts what a signature covers.
                    log.attach_witness(w.every(Duration::from_secs(1)), adopt_unsigned)
                        .map_err(|e| ServeError::Audit(e.to_string()))?;
                }
                let started = std::time::Instant::now();
                let mut jobs = utilisation_jobs.as_ref().map(utilisation::JobIndex::new);
                let recovered = core::recover(&log, set.clone(), engine_config, replay_after_prune, &mut |input| {
                    if let Some(j) = jobs.as_mut() {
                        j.observe(input);
                    }
                })
                .map_err(|e| ServeError::Audit(e.0))?;
                let health_notes = recovered.health_notes();
                metrics.restore_refused.store(recovered.refused.len() as u64, std::sync::atomic::Ordering::Relaxed);
                let core::Recovered { mut engine, seq, replayed, .. } = recovered;
                let aliased = core::remember_person_ids(&log, &mut engine, &auth)
                    .map_err(|e| ServeError::Audit(e.to_string()))?;
                if aliased > 0 {
                    tracing::info!(
                        ids = aliased,
                        "ids people sent before this version are remembered under their new name (~person:id) too"
                    );
                }
                if let Some(j) = jobs.as_mut() {
                    // Inputs before the snapshot were not replayed: learn the running jobs' keys from theirs.
                    j.rebuild(&log, &engine).map_err(|e| ServeError::Audit(e.to_string()))?;
                }
                tracing::info!(
                    event_seq = seq,
                    replayed,
                    live_jobs = engine.state().live_jobs(),
                    ms = started.elapsed().as_secs_f64() * 1e3,
                    "engine state recovered from the audit log"
                );
                metrics.policies.store(set.len() as u64, std::sync::atomic::Ordering::Relaxed);
                metrics.live_jobs.store(engine.state().live_jobs() as u64, std::sync::atomic::Ordering::Relaxed);
                metrics.tracked_jobs.store(engine.state().tracked_jobs() as u64, std::sync::atomic::Ordering::Relaxed);
                let writer = bursar_audit::Writer::spawn(
                    log,
                    // A failed commit (disk full) is retried until it succeeds, and /healthz says so.
                    bursar_audit::WriterConfig { receipts: true, retry: true, ..bursar_audit::WriterConfig::default() },
                    bursar_audit::no_hook(),
                )
                .map_err(|e| ServeError::Audit(e.to_string()))?;
                // The session records the load of the set in force, as every (re)load is recorded.
                let health = writer.health();
                // Recovery replayed the journal unbounded (it holds only what was accepted); from here on
                // an event dated beyond the skew is refused.
                let session = bursar_session::Session::open(engine, writer, bursar_session::Origin::Producer)
                    .map_err(|e| ServeError::Audit(e.to_string()))?
                    .with_clock_bound(bursar_session::ClockBound::Wall { skew: max_skew });
                Ok((core::Core::new(session, metrics, decisions_tx, seq, jobs), health, health_notes))
            },
        )
        .await
        .map_err(|e| ServeError::Io { context: "open the audit log".into(), message: e.to_string() })??
    };

    let (engine_tx, engine_rx) = mpsc::channel::<core::Work>(config.queue.max(1));
    // Before the engine applies anything new: the notifier's first cursor is the recovered log's end.
    let notify = config.notify.clone().map(|mut n| {
        if tls.is_some() {
            n.listening_on_tls(addr);
        }
        n
    });
    let (links, notifier) = notices::start(notify, &config.audit, addr, engine_tx.clone())?;
    let snapshot_every = config.snapshot_every;
    let engine_thread = std::thread::Builder::new()
        .name("bursar-engine".into())
        .spawn(move || core.run(engine_rx, snapshot_every))
        .map_err(|e| ServeError::Io { context: "start the engine thread".into(), message: e.to_string() })?;

    let status: reload::SharedStatus = Arc::new(RwLock::new(reload::PolicyStatus {
        set: Some(set.clone()),
        loaded_at: wall_time().to_string(),
        last: None,
    }));
    // Who may call: swapped whole when a reload rereads the configuration file.
    let shared_auth: auth::SharedAuth = Arc::new(RwLock::new(config.auth.clone()));
    let (reload_tx, reload_rx) = mpsc::channel::<reload::ReloadRequest>(64);
    let reloader = tokio::spawn(
        reload::Reloader {
            dir: config.policies.clone(),
            loader: config.loader.clone(),
            target: reload::Target::Engine(engine_tx.clone()),
            status: status.clone(),
            metrics: metrics.clone(),
            config: config.config_file.clone().map(|p| (p, shared_auth.clone())),
            site: Arc::new(std::sync::Mutex::new(
                config.config_file.as_deref().and_then(|p| bursar_config::load(p).ok()),
            )),
        }
        .run(reload_rx),
    );
    // Reloads also come from the directory watcher and SIGHUP.
    let triggers = reload::Triggers::start(&config.policies, config.watch, config.debounce, &reload_tx)?;

    // The wall-clock ticker.
    let ticker = {
        let engine_tx = engine_tx.clone();
        let every = config.tick;
        tokio::spawn(async move {
            let mut iv = tokio::time::interval(every);
            iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                iv.tick().await;
                if engine_tx.send(core::Work::Tick(wall_time())).await.is_err() {
                    return;
                }
            }
        })
    };

    // Periodic snapshot requests (the engine thread also snapshots on its own after a batch).
    let snapshotter = {
        let engine_tx = engine_tx.clone();
        tokio::spawn(async move {
            let mut iv = tokio::time::interval(snapshot_every);
            iv.tick().await;
            loop {
                iv.tick().await;
                if engine_tx.send(core::Work::Snapshot { reply: None }).await.is_err() {
                    return;
                }
            }
        })
    };

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    // The Prometheus utilisation source, on its own thread (blocking HTTP to Prometheus).
    let skips: Option<utilisation::SharedSkips> = config.utilisation.as_ref().map(|_| Arc::default());
    let utilisation_thread = match config.utilisation.clone() {
        Some(u) => {
            let source = bursar_prometheus::Source::new(u.prometheus).map_err(|e| ServeError::Io {
                context: "start the utilisation source".into(),
                message: e.to_string(),
            })?;
            let resume = bursar_prometheus::ResumeFile::new(utilisation::resume_path(&config.audit));
            metrics.prometheus_on.store(true, std::sync::atomic::Ordering::Relaxed);
            let (engine, counters, stop) = (engine_tx.clone(), metrics.prometheus.clone(), shutdown_rx.clone());
            let board = skips.clone().unwrap_or_default();
            Some(
                std::thread::Builder::new()
                    .name("bursar-utilisation".into())
                    .spawn(move || utilisation::run(source, resume, engine, counters, board, stop))
                    .map_err(|e| ServeError::Io {
                        context: "start the utilisation source".into(),
                        message: e.to_string(),
                    })?,
            )
        }
        None => None,
    };
    let backend = local::Local {
        engine: engine_tx.clone(),
        reload: reload_tx.clone(),
        decisions: decisions_tx.clone(),
        status,
        metrics: metrics.clone(),
        audit: config.audit.clone(),
        shutdown: shutdown_rx.clone(),
        journal: journal_health.clone(),
        health_notes: health_notes.into(),
        prices: config.prices.clone().map(Arc::new),
        capacity: config.capacity.clone().into(),
        links,
        pool_input: Arc::default(),
        build: Arc::new(config.build.clone()),
        skips,
    };
    let door = doors::door(&config, backend, shared_auth, metrics.clone());
    let doors = doors::Doors::open(&config, &door, router::local, shutdown_rx.clone()).await?;
    let admit_addr = doors.admit_addr;
    ready(&Ready { addr, admit: admit_addr })?;
    tracing::info!(%addr, admit = ?admit_addr, policies = set.len(), digest = set.digest(), "listening");
    systemd::notify("READY=1");

    let main_shutdown = shutdown_rx.clone();
    let failing_journal = journal_health.clone();
    let drain = async move {
        shutdown.await;
        let _ = shutdown_tx.send(true);
        // A stop on a full disk: what cannot be committed was answered 503 (or not at all), never
        // as done; waiting for space would keep SIGTERM from working. Give the writer a moment, then
        // let it give up, so the process exits and a restart replays the log.
        let mut failing_since: Option<std::time::Instant> = None;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if failing_journal.failing().is_none() {
                failing_since = None;
                continue;
            }
            let since = *failing_since.get_or_insert_with(std::time::Instant::now);
            if since.elapsed() >= SHUTDOWN_COMMIT_GRACE {
                tracing::error!(
                    "stopping while the audit log cannot commit: giving up on what is not committed (it was never answered as done); a restart replays the log"
                );
                failing_journal.give_up();
                return;
            }
        }
    };
    tokio::spawn(drain);
    doors.serve(listener, main_shutdown).await;

    // Drain: nothing new arrives now; stop the producers, let the engine finish its queue.
    systemd::notify("STOPPING=1");
    ticker.abort();
    snapshotter.abort();
    triggers.stop();
    drop(reload_tx);
    if let Some(t) = utilisation_thread {
        // It looks at the shutdown flag at least every 200 ms (a poll in flight ends by its timeout).
        let _ = tokio::task::spawn_blocking(move || t.join()).await;
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), reloader).await;
    if let Some(n) = notifier {
        let _ = tokio::task::spawn_blocking(move || n.stop()).await;
    }
    let (tx, rx) = oneshot::channel();
    let _ = engine_tx.send(core::Work::Snapshot { reply: Some(tx) }).await;
    let _ = engine_tx.send(core::Work::Shutdown).await;
    drop(engine_tx);
    let snap = rx.await;
    let joined = tokio::task::spawn_blocking(move || engine_thread.join()).await;
    match (snap, joined) {
        (Ok(Ok(seq)), Ok(Ok(()))) => {
            tracing::info!(event_seq = seq, "stopped cleanly");
            Ok(())
        }
        _ => Err(ServeError::EngineFailed),
    }
}
