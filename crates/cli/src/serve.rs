//! `bursar serve`: parse the options, check the bind address, start the tokio runtime and run
//! `bursar-serve` until `SIGTERM`/`SIGINT`. The server itself lives in the `bursar-serve` crate; this
//! module only wires the command line to it (and passes the same policy loader as `check` and `eval`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration as StdDuration;

use bursar_model::Duration;

use crate::{CliError, ErrorFormat, ExitCode};

/// Log format of `serve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// For people.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

/// Options of `bursar serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// The policy directory (watched: edits take effect without a restart). Required, here or as
    /// `[serve] policies` in --config.
    #[arg(long)]
    pub policies: Option<PathBuf>,
    /// The audit database (SQLite, created if missing); also holds the engine snapshots. Required,
    /// here or as `[serve] audit` in --config.
    #[arg(long)]
    pub audit: Option<PathBuf>,
    /// Address to listen on. Anything but loopback requires principals (--config).
    /// [default: 127.0.0.1:7878]
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// The site's configuration file (`/etc/bursar/bursar.toml` by convention): every option below as
    /// `[serve]` (and `[tls]`, `[witness]`, `[cluster]`), who may call and what each may do
    /// (`[auth]`, `[[principal]]`), `[clock] max_skew`, `[utilisation]` and `[notify]`; a flag given
    /// here overrides the file. Reread on SIGHUP and `POST /v1/reload`: principals and tokens change
    /// at once, and the reload says which other changes need a restart (docs/operations.md).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A file holding one bearer token that has every power (a principal named `token`): the quick
    /// way to protect a test server. A site declares principals with --config instead; a token is
    /// never taken from the command line, where every local user can read it.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    pub token_file: Option<PathBuf>,
    /// Write the bound port here once listening (useful with `--listen 127.0.0.1:0`).
    #[arg(long)]
    pub port_file: Option<PathBuf>,
    /// Log format.
    /// [default: human]
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Log level: error, warn, info, debug, trace.
    /// [default: info]
    #[arg(long)]
    pub log_level: Option<tracing_level::Level>,
    /// Wall-clock tick that drives timers (idle windows, maximum runtimes, approval expiry).
    /// [default: 1s]
    #[arg(long, value_parser = parse_duration)]
    pub tick: Option<Duration>,
    /// How often the engine state is snapshotted into the audit database (when it changed).
    /// [default: 30s]
    #[arg(long, value_parser = parse_duration)]
    pub snapshot_every: Option<Duration>,
    /// Quiet time after a policy file changes before reloading.
    /// [default: 100ms]
    #[arg(long, value_parser = parse_duration)]
    pub debounce: Option<Duration>,
    /// Do not watch the policy directory (reload with SIGHUP or POST /v1/reload only).
    #[arg(long)]
    pub no_watch: bool,
    /// Also take events as JSON Lines on this Unix socket (one answer line per input line).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Read GPU utilisation from Prometheus (dcgm-exporter), as configured in this TOML file (see
    /// docs/integrations/utilisation.md): `job.sample` events for the idle rule, with nothing for the
    /// site to write.
    #[arg(long, value_name = "FILE")]
    pub utilisation: Option<PathBuf>,
    /// Send the decisions that need a person (approvals, idle warnings, reclaims, alerts) to
    /// Alertmanager or a webhook, with signed one-click action links, as configured in this TOML file
    /// (see docs/notifications.md).
    #[arg(long, value_name = "FILE")]
    pub notify: Option<PathBuf>,
    /// A price file (as for `bursar report --prices`) for the report routes: `GET /v1/report` and
    /// `GET /report` then compare billing modes and, with `cost_per_unit=true`, price the work per
    /// unit. Read once at start; a bad file stops the start with its line and column.
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
    /// Permission bits of the socket file, in octal: who may write events on it (the HTTP token does
    /// not apply to the socket). The default lets the user bursar runs as and its group write.
    /// [default: 660]
    #[arg(long, value_parser = parse_mode)]
    pub socket_mode: Option<u32>,
    /// Sign the audit log's head with this Ed25519 key (from `bursar audit keygen`) at most once a
    /// second and at shutdown, appending each signed head to `--witness`: `bursar audit verify
    /// --witness` then catches truncation, rollback and re-hashing (docs/audit.md).
    #[arg(long, value_name = "FILE", requires = "witness")]
    pub signing_key: Option<PathBuf>,
    /// With --signing-key: the append-only file signed heads go to, kept where the database's editors
    /// cannot write.
    #[arg(long, value_name = "FILE", requires = "signing_key")]
    pub witness: Option<PathBuf>,
    /// With --signing-key: start even if the log holds writes no signed head covers (bursar was
    /// killed before signing them), adopting them; the adoption is recorded in the log, and a
    /// snapshot among them is not restored. Without it such a log does not start (docs/audit.md).
    #[arg(long)]
    pub adopt_unsigned: bool,
    /// Start from a pruned audit log that holds no usable engine snapshot at or after its prune,
    /// replaying only the events after it: jobs and usage from before the prune are then not counted.
    /// Without it such a log does not start. For one start after an operator has weighed it (the
    /// configuration file has no key for it); `/healthz` says so while it runs.
    #[arg(long)]
    pub replay_after_prune: bool,
    /// Run (and reload) a policy directory that holds no policy. Without it, an empty directory does
    /// not start, and a reload that finds every policy gone fails and keeps the last set in force: an
    /// empty set allows every job.
    #[arg(long)]
    pub allow_empty: bool,
    /// Request body limit in bytes (a larger declared body is refused with 413 before it is read).
    /// [default: 8 MiB]
    #[arg(long)]
    pub max_body: Option<usize>,
    /// A second listener for the scheduler's admission hook: only POST /v1/admit and GET /healthz,
    /// with its own connection budget, so event producers and streams cannot crowd admissions out.
    #[arg(long, value_name = "ADDR")]
    pub admit_listen: Option<SocketAddr>,
    /// Serve over TLS with this PEM certificate (chain), on every listener (--admit-listen too).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// With --tls-cert: accept client certificates issued by the CA(s) in this PEM file; a verified
    /// certificate's subject (CN, the whole DN, its DNS names) reaches the request.
    #[arg(long, value_name = "FILE")]
    pub tls_client_ca: Option<PathBuf>,
    /// With --tls-client-ca: refuse, at the handshake, a client that presents no certificate.
    #[arg(long)]
    pub tls_require_client_cert: bool,
    /// Open connections at most, per listener; one more is answered 503 and closed.
    /// [default: 512]
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// Open connections from one address at most, per listener; one more is answered 503 and
    /// closed, so one address cannot crowd out the others.
    /// [default: 128]
    #[arg(long)]
    pub max_connections_per_address: Option<usize>,
    /// Connections from one address whose request head has not arrived yet (just opened, or partway
    /// through a later head; an idle keep-alive connection is only open) at most, per listener; one
    /// more is answered 503 and closed, so half-sent requests from one address cannot starve
    /// admissions from the others.
    /// [default: 32]
    #[arg(long)]
    pub max_unfinished_per_address: Option<usize>,
    /// Time for a request's head to arrive, and for an idle keep-alive connection's next request.
    /// [default: 10s]
    #[arg(long, value_parser = parse_duration)]
    pub header_timeout: Option<Duration>,
    /// Time for a request's body to arrive once its head has.
    /// [default: 30s]
    #[arg(long, value_parser = parse_duration)]
    pub body_timeout: Option<Duration>,
    /// Engine queue length; requests beyond it wait (back-pressure).
    /// [default: 4096]
    #[arg(long)]
    pub queue: Option<usize>,
    /// Commit with `synchronous=NORMAL`: survives a crash of bursar, may lose the last milliseconds on
    /// power loss. The default (`FULL`) survives power loss.
    #[arg(long)]
    pub fast_commit: bool,
    /// How long event ids are remembered to drop resent events.
    /// [default: 24h]
    #[arg(long, value_parser = parse_duration)]
    pub dedupe_window: Option<Duration>,
    /// How long an admitted job may wait to start before its reservation is released as stale, with
    /// an alert (`0s`: never).
    /// [default: 7d]
    #[arg(long, value_parser = parse_duration)]
    pub stale_after: Option<Duration>,
    /// Run as one instance of a bursar cluster on NATS JetStream at these URLs (comma-separated): the
    /// partitions are shared with the other instances, each owned by one at a time, and `--audit` is
    /// this instance's projection of the decisions stream (docs/cluster.md). A server that requires a
    /// login takes it in the URL: `nats://user:password@host:4222` or `nats://token@host:4222`.
    /// Without it, serve needs no NATS.
    #[arg(long, value_name = "NATS_URLS")]
    pub cluster: Option<String>,
    /// With --cluster: this instance's name, unique in the cluster (default: the host name and PID).
    #[arg(long)]
    pub instance: Option<String>,
    /// With --cluster: the partition count, used only by the instance that creates the cluster.
    /// [default: 16]
    #[arg(long)]
    pub partitions: Option<u32>,
    /// With --cluster: replicas of every stream and bucket (at most the NATS servers).
    /// [default: 3]
    #[arg(long)]
    pub replicas: Option<usize>,
    /// With --cluster: an owner that cannot renew its lease for this long loses its partitions.
    /// [default: 2s]
    #[arg(long, value_parser = parse_duration)]
    pub lease_ttl: Option<Duration>,
    /// With --cluster: the longest wait for an owner's admission decision (keep it below the Slurm
    /// hook's timeout, 2 s).
    /// [default: 1500ms]
    #[arg(long, value_parser = parse_duration)]
    pub admit_timeout: Option<Duration>,
    /// With --cluster: the events stream's `Nats-Msg-Id` duplicate window (bursar's own dedupe,
    /// --dedupe-window, catches resends after it).
    /// [default: 2m]
    #[arg(long, value_parser = parse_duration)]
    pub stream_dedupe_window: Option<Duration>,
}

/// Log levels as a clap value.
pub mod tracing_level {
    /// A log level.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
    pub enum Level {
        /// Errors only.
        Error,
        /// Warnings and errors.
        Warn,
        /// Normal operation.
        Info,
        /// Details.
        Debug,
        /// Everything.
        Trace,
    }

    impl Level {
        /// The `tracing` level.
        pub fn tracing(self) -> tracing::Level {
            match self {
                Level::Error => tracing::Level::ERROR,
                Level::Warn => tracing::Level::WARN,
                Level::Info => tracing::Level::INFO,
                Level::Debug => tracing::Level::DEBUG,
                Level::Trace => tracing::Level::TRACE,
            }
        }
    }
}

/// Reads `--config`, or prints every error in it and stops.
fn site(args: &ServeArgs, error_format: ErrorFormat) -> Result<Option<bursar_config::SiteConfig>, CliError> {
    let Some(path) = &args.config else { return Ok(None) };
    match bursar_config::load(path) {
        Ok(s) => Ok(Some(s)),
        Err(ds) => {
            crate::print_diagnostics(&ds, error_format);
            Err(CliError::Message(format!(
                "{} error(s) in the configuration `{}`; not starting",
                ds.len(),
                path.display()
            )))
        }
    }
}

/// The authenticator of the configuration (or of `--token-file`), or an open one.
fn authenticator(
    args: &ServeArgs,
    site: Option<&bursar_config::SiteConfig>,
) -> Result<bursar_auth::Authenticator, CliError> {
    if let Some(site) = site {
        return bursar_auth::Authenticator::new(&site.auth)
            .map_err(|e| CliError::Message(format!("{}: {e}", site.path.display())));
    }
    if let Some(path) = &args.token_file {
        let token = std::fs::read_to_string(path)
            .map_err(|e| CliError::io(format!("cannot read the token file `{}`", path.display()), e))?;
        if token.trim().is_empty() {
            return Err(CliError::Message(format!("the token file `{}` is empty", path.display())));
        }
        let settings = bursar_auth::AuthSettings {
            principals: vec![bursar_auth::PrincipalDecl {
                name: "token".into(),
                roles: bursar_auth::Roles::all(),
                tokens: vec![bursar_auth::TokenDecl { hash: bursar_auth::TokenHash::of(&token), expires: None }],
                ..Default::default()
            }],
            ..Default::default()
        };
        return bursar_auth::Authenticator::new(&settings).map_err(|e| CliError::Message(e.to_string()));
    }
    Ok(bursar_auth::Authenticator::open())
}

/// `[utilisation]` or `[notify]` of the configuration file, read and checked by its crate.
fn site_section<T: serde::de::DeserializeOwned>(
    site: &bursar_config::SiteConfig,
    key: &str,
    error_format: ErrorFormat,
) -> Result<Option<T>, CliError> {
    let file = site.path.display().to_string();
    bursar_config::section::<T>(&file, &site.text, key).map_err(|d| {
        crate::print_diagnostics(std::slice::from_ref(&d), error_format);
        CliError::Message(format!("the `[{key}]` section of `{file}` is not valid"))
    })
}

/// What serve runs with: each setting from its flag, else from the configuration file, else its
/// default.
pub fn settings(
    args: &ServeArgs,
    site: Option<&bursar_config::SiteConfig>,
    error_format: ErrorFormat,
) -> Result<Resolved, CliError> {
    let none = bursar_config::ServeSection::default();
    let file = site.map_or(&none, |s| &s.serve);
    let policies = args.policies.clone().or_else(|| file.policies.clone()).ok_or_else(|| {
        CliError::Message("which policies? pass `--policies DIR`, or set `[serve] policies` in `--config`".into())
    })?;
    let audit = args.audit.clone().or_else(|| file.audit.clone()).ok_or_else(|| {
        CliError::Message("where is the audit log? pass `--audit FILE`, or set `[serve] audit` in `--config`".into())
    })?;
    let d = |flag: Option<Duration>, from_file: Option<Duration>, default: &str| -> Duration {
        flag.or(from_file).unwrap_or_else(|| Duration::parse(default).unwrap_or(Duration(1000)))
    };
    let mut config = bursar_serve::Config::new(&policies, &audit);
    let log_format = args.log_format.or(match file.log_format.as_deref() {
        Some("json") => Some(LogFormat::Json),
        Some(_) => Some(LogFormat::Human),
        None => None,
    });
    let log_level = args.log_level.or(match file.log_level.as_deref() {
        Some("error") => Some(tracing_level::Level::Error),
        Some("warn") => Some(tracing_level::Level::Warn),
        Some("debug") => Some(tracing_level::Level::Debug),
        Some("trace") => Some(tracing_level::Level::Trace),
        Some(_) => Some(tracing_level::Level::Info),
        None => None,
    });
    config.durable = !(args.fast_commit || file.fast_commit.unwrap_or(false));
    config.config_file = args.config.clone();
    config.build = crate::build::info();
    config.tick = std_duration(d(args.tick, file.tick, "1s"));
    config.snapshot_every = std_duration(d(args.snapshot_every, file.snapshot_every, "30s"));
    config.debounce = std_duration(d(args.debounce, file.debounce, "100ms"));
    config.watch = !args.no_watch && file.watch.unwrap_or(true);
    config.max_body = args.max_body.or(file.max_body).unwrap_or(8 * 1024 * 1024);
    config.admit_listen = args.admit_listen.or(file.admit_listen);
    let tls_file = site.and_then(|s| s.tls.as_ref());
    config.tls = match (args.tls_cert.clone().zip(args.tls_key.clone()), tls_file) {
        (Some((cert_file, key_file)), t) => Some(bursar_serve::listen::TlsConfig {
            cert_file,
            key_file,
            client_ca: args.tls_client_ca.clone().or_else(|| t.and_then(|t| t.client_ca.clone())),
            require_client_cert: args.tls_require_client_cert || t.is_some_and(|t| t.require_client_cert),
        }),
        (None, Some(t)) => Some(bursar_serve::listen::TlsConfig {
            cert_file: t.cert.clone(),
            key_file: t.key.clone(),
            client_ca: args.tls_client_ca.clone().or_else(|| t.client_ca.clone()),
            require_client_cert: args.tls_require_client_cert || t.require_client_cert,
        }),
        (None, None) => None,
    };
    if config.tls.as_ref().is_some_and(|t| t.require_client_cert && t.client_ca.is_none()) {
        return Err(CliError::Message(
            "`--tls-require-client-cert` needs `--tls-client-ca`: the CA client certificates are checked against"
                .into(),
        ));
    }
    config.max_connections = args.max_connections.or(file.max_connections).unwrap_or(512);
    config.max_connections_per_address = args
        .max_connections_per_address
        .or(file.max_connections_per_address)
        .unwrap_or(bursar_serve::DEFAULT_MAX_PER_ADDRESS);
    config.max_unfinished_per_address = args
        .max_unfinished_per_address
        .or(file.max_unfinished_per_address)
        .unwrap_or(bursar_serve::DEFAULT_MAX_UNFINISHED_PER_ADDRESS);
    config.origins = file.origins.clone().unwrap_or_default();
    config.header_timeout = std_duration(d(args.header_timeout, file.header_timeout, "10s"));
    config.body_timeout = std_duration(d(args.body_timeout, file.body_timeout, "30s"));
    config.socket = args.socket.clone().or_else(|| file.socket.clone());
    config.socket_mode = args.socket_mode.or(file.socket_mode).unwrap_or(0o660);
    let witness_file = site.and_then(|s| s.witness.as_ref());
    config.witness = args
        .signing_key
        .clone()
        .zip(args.witness.clone())
        .or_else(|| witness_file.map(|w| (w.signing_key.clone(), w.file.clone())));
    config.adopt_unsigned = args.adopt_unsigned || witness_file.is_some_and(|w| w.adopt_unsigned);
    config.replay_after_prune = args.replay_after_prune;
    config.utilisation = match (&args.utilisation, site) {
        (Some(path), _) => Some(
            bursar_serve::utilisation::UtilisationConfig::load(path).map_err(|e| CliError::Message(e.to_string()))?,
        ),
        (None, Some(s)) if s.utilisation => {
            site_section::<bursar_serve::utilisation::UtilisationConfig>(s, "utilisation", error_format)?
                .map(|u| u.checked(&s.path.display().to_string()))
                .transpose()
                .map_err(|e| CliError::Message(e.to_string()))?
        }
        _ => None,
    };
    config.notify = match (&args.notify, site) {
        (Some(path), _) => Some(bursar_notify::NotifyConfig::load(path).map_err(|e| CliError::Message(e.to_string()))?),
        (None, Some(s)) if s.notify => site_section::<bursar_notify::NotifyConfig>(s, "notify", error_format)?
            .map(|n| n.checked(&s.path.display().to_string()))
            .transpose()
            .map_err(|e| CliError::Message(e.to_string()))?,
        _ => None,
    };
    if let Some(path) = args.prices.clone().or_else(|| file.prices.clone()) {
        config.prices = Some(bursar_report::Prices::from_file(&path).map_err(|e| CliError::Message(e.to_string()))?);
    }
    config.queue = args.queue.or(file.queue).unwrap_or(4096);
    config.engine = bursar_engine::EngineConfig {
        dedupe_window: d(args.dedupe_window, file.dedupe_window, "24h"),
        stale_after: args.stale_after.or(file.stale_after).unwrap_or(bursar_engine::STALE_AFTER),
        ..Default::default()
    };
    if let Some(s) = site {
        config.max_skew = s.clock.max_skew;
        config.capacity = s
            .capacity
            .iter()
            .map(|c| bursar_model::CapacityRow {
                region: c.region.clone(),
                gpu_type: c.gpu_type.clone(),
                queue: c.queue.clone(),
                in_service: c.gpus,
                allocated: bursar_model::Gpus::ZERO,
                free: c.gpus,
                drained: c.drained,
                backfill: c.backfill.clone(),
            })
            .collect();
    }
    let allow_empty = args.allow_empty || file.allow_empty.unwrap_or(false);
    let cluster_file = site.and_then(|s| s.cluster.as_ref());
    let cluster = args.cluster.clone().or_else(|| cluster_file.map(|c| c.urls.clone())).map(|url| {
        let instance =
            args.instance.clone().or_else(|| cluster_file.and_then(|c| c.instance.clone())).unwrap_or_else(|| {
                let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
                let host: String = host.trim().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
                format!("{}-{}", if host.is_empty() { "bursar" } else { &host }, std::process::id())
            });
        let mut c = bursar_cluster::ClusterConfig::new(url, instance, &audit);
        c.partitions = args.partitions.or(cluster_file.and_then(|c| c.partitions)).unwrap_or(16);
        c.replicas = args.replicas.or(cluster_file.and_then(|c| c.replicas)).unwrap_or(3);
        c.lease_ttl = std_duration(d(args.lease_ttl, cluster_file.and_then(|c| c.lease_ttl), "2s"));
        c.admit_timeout = std_duration(d(args.admit_timeout, cluster_file.and_then(|c| c.admit_timeout), "1500ms"));
        c.dedupe_window =
            std_duration(d(args.stream_dedupe_window, cluster_file.and_then(|c| c.stream_dedupe_window), "2m"));
        c
    });
    Ok(Resolved {
        config,
        cluster,
        listen: args.listen.or(file.listen).unwrap_or(SocketAddr::from(([127, 0, 0, 1], 7878))),
        port_file: args.port_file.clone().or_else(|| file.port_file.clone()),
        log_format: log_format.unwrap_or_default(),
        log_level: log_level.unwrap_or(tracing_level::Level::Info),
        allow_empty,
    })
}

/// Serve's settings once the flags, the file and the defaults are combined.
pub struct Resolved {
    /// The server's settings (its loader is set by [`run`]).
    pub config: bursar_serve::Config,
    /// `--cluster`'s settings, when serve is one instance of a cluster.
    pub cluster: Option<bursar_cluster::ClusterConfig>,
    /// The main listener's address.
    pub listen: SocketAddr,
    /// Where the bound port is written.
    pub port_file: Option<PathBuf>,
    /// The log format.
    pub log_format: LogFormat,
    /// The log level.
    pub log_level: tracing_level::Level,
    /// Whether an empty policy directory may run.
    pub allow_empty: bool,
}

fn parse_mode(s: &str) -> Result<u32, String> {
    match u32::from_str_radix(s.trim_start_matches("0o"), 8) {
        Ok(m) if m <= 0o777 => Ok(m),
        _ => Err(format!("`{s}` is not a permission mode: write it in octal, e.g. `660` or `600`")),
    }
}

use crate::values::parse_duration;

/// A setting's duration, at least a millisecond (a zero interval would spin).
fn std_duration(d: Duration) -> StdDuration {
    crate::values::std_duration(d).max(StdDuration::from_millis(1))
}

/// Runs the server until SIGTERM or SIGINT.
pub fn run(args: &ServeArgs, error_format: ErrorFormat) -> Result<ExitCode, CliError> {
    let site = site(args, error_format)?;
    let auth = authenticator(args, site.as_ref())?;
    let Resolved { mut config, cluster, listen, port_file, log_format, log_level, allow_empty } =
        settings(args, site.as_ref(), error_format)?;
    if let Err(e) = bursar_serve::check_bind(listen, &auth) {
        return Err(CliError::Message(e.to_string()));
    }
    config.auth = std::sync::Arc::new(auth);
    let level = match log_level {
        tracing_level::Level::Error => tracing::Level::ERROR,
        tracing_level::Level::Warn => tracing::Level::WARN,
        tracing_level::Level::Info => tracing::Level::INFO,
        tracing_level::Level::Debug => tracing::Level::DEBUG,
        tracing_level::Level::Trace => tracing::Level::TRACE,
    };
    let format = match log_format {
        LogFormat::Human => bursar_serve::LogFormat::Human,
        LogFormat::Json => bursar_serve::LogFormat::Json,
    };
    bursar_serve::init_logging(format, level);
    // The same loader as `check` and `eval`: TOML policies and WebAssembly components.
    let host = bursar_wasm::WasmHost::shared().map_err(|e| CliError::Message(e.to_string()))?;
    config.loader = std::sync::Arc::new(move |dir: &std::path::Path| {
        if allow_empty { bursar_loader::load_dir_allowing_empty(dir, host) } else { bursar_loader::load_dir(dir, host) }
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("bursar-serve")
        .build()
        .map_err(|e| CliError::io("cannot start the async runtime", e))?;
    let result = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| CliError::io(format!("cannot listen on `{listen}`"), e))?;
        // The port file and the "listening" line come once the policies compiled and the engine
        // recovered: a port file never names a server that is about to exit.
        let ready = |r: &bursar_serve::Ready| {
            if let Some(path) = &port_file {
                let tmp = path.with_extension("tmp");
                std::fs::write(&tmp, format!("{}\n", r.addr.port()))
                    .and_then(|()| std::fs::rename(&tmp, path))
                    .map_err(|e| bursar_serve::ServeError::Io {
                        context: format!("cannot write the port file `{}`", path.display()),
                        message: e.to_string(),
                    })?;
            }
            match r.admit {
                Some(a) => eprintln!("bursar serve: listening on {} (admissions also on {a})", r.addr),
                None => eprintln!("bursar serve: listening on {}", r.addr),
            }
            Ok(())
        };
        let served = match cluster {
            Some(c) => {
                bursar_serve::cluster::serve_cluster(config, c, listener, bursar_serve::shutdown_signal(), ready).await
            }
            None => bursar_serve::serve_then(config, listener, bursar_serve::shutdown_signal(), ready).await,
        };
        match served {
            Ok(()) => Ok(ExitCode::Ok),
            Err(bursar_serve::ServeError::Policies { errors, .. }) => {
                crate::print_diagnostics(&errors, error_format);
                Ok(ExitCode::Failed)
            }
            Err(e) => Err(CliError::Message(e.to_string())),
        }
    });
    rt.shutdown_timeout(StdDuration::from_secs(5));
    result
}
