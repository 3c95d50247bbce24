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
    /// The policy directory (watched: edits take effect without a restart).
    #[arg(long)]
    pub policies: PathBuf,
    /// The audit database (SQLite, created if missing); also holds the engine snapshots.
    #[arg(long)]
    pub audit: PathBuf,
    /// Address to listen on. Anything but loopback requires principals (--config).
    #[arg(long, default_value = "127.0.0.1:7878")]
    pub listen: SocketAddr,
    /// The site's configuration file (`/etc/bursar/bursar.toml` by convention): who may call and what
    /// each may do (`[auth]`, `[[principal]]`), and `[clock] max_skew`. Reread on SIGHUP and `POST
    /// /v1/reload`, so a rotated token works without a restart (docs/security.md).
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
    #[arg(long, value_enum, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, default_value = "info")]
    pub log_level: tracing_level::Level,
    /// Wall-clock tick that drives timers (idle windows, maximum runtimes, approval expiry).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub tick: Duration,
    /// How often the engine state is snapshotted into the audit database (when it changed).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub snapshot_every: Duration,
    /// Quiet time after a policy file changes before reloading.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    pub debounce: Duration,
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
    #[arg(long, default_value = "660", value_parser = parse_mode, requires = "socket")]
    pub socket_mode: u32,
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
    #[arg(long, requires = "signing_key")]
    pub adopt_unsigned: bool,
    /// Run (and reload) a policy directory that holds no policy. Without it, an empty directory does
    /// not start, and a reload that finds every policy gone fails and keeps the last set in force: an
    /// empty set allows every job.
    #[arg(long)]
    pub allow_empty: bool,
    /// Request body limit in bytes (a larger declared body is refused with 413 before it is read).
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    pub max_body: usize,
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
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// With --tls-client-ca: refuse, at the handshake, a client that presents no certificate.
    #[arg(long, requires = "tls_client_ca")]
    pub tls_require_client_cert: bool,
    /// Open connections at most, per listener; one more is answered 503 and closed.
    #[arg(long, default_value_t = 512)]
    pub max_connections: usize,
    /// Time for a request's head to arrive, and for an idle keep-alive connection's next request.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub header_timeout: Duration,
    /// Time for a request's body to arrive once its head has.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub body_timeout: Duration,
    /// Engine queue length; requests beyond it wait (back-pressure).
    #[arg(long, default_value_t = 4096)]
    pub queue: usize,
    /// Commit with `synchronous=NORMAL`: survives a crash of bursar, may lose the last milliseconds on
    /// power loss. The default (`FULL`) survives power loss.
    #[arg(long)]
    pub fast_commit: bool,
    /// How long event ids are remembered to drop resent events.
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub dedupe_window: Duration,
    /// Run as one instance of a bursar cluster on NATS JetStream at these URLs (comma-separated): the
    /// partitions are shared with the other instances, each owned by one at a time, and `--audit` is
    /// this instance's projection of the decisions stream (docs/cluster.md). A server that requires a
    /// login takes it in the URL: `nats://user:password@host:4222` or `nats://token@host:4222`.
    /// Without it, serve needs no NATS.
    #[arg(long, value_name = "NATS_URLS")]
    pub cluster: Option<String>,
    /// With --cluster: this instance's name, unique in the cluster (default: the host name and PID).
    #[arg(long, requires = "cluster")]
    pub instance: Option<String>,
    /// With --cluster: the partition count, used only by the instance that creates the cluster.
    #[arg(long, default_value_t = 16, requires = "cluster")]
    pub partitions: u32,
    /// With --cluster: replicas of every stream and bucket (at most the NATS servers).
    #[arg(long, default_value_t = 3, requires = "cluster")]
    pub replicas: usize,
    /// With --cluster: an owner that cannot renew its lease for this long loses its partitions.
    #[arg(long, default_value = "2s", value_parser = parse_duration, requires = "cluster")]
    pub lease_ttl: Duration,
    /// With --cluster: the longest wait for an owner's admission decision (keep it below the Slurm
    /// hook's timeout, 2 s).
    #[arg(long, default_value = "1500ms", value_parser = parse_duration, requires = "cluster")]
    pub admit_timeout: Duration,
    /// With --cluster: the events stream's `Nats-Msg-Id` duplicate window (bursar's own dedupe,
    /// --dedupe-window, catches resends after it).
    #[arg(long, default_value = "2m", value_parser = parse_duration, requires = "cluster")]
    pub stream_dedupe_window: Duration,
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
}

/// The authenticator and the clock skew of `--config` (or `--token-file`), or open and the default.
fn site_auth(args: &ServeArgs, error_format: ErrorFormat) -> Result<(bursar_auth::Authenticator, Duration), CliError> {
    if let Some(path) = &args.config {
        let site = match bursar_config::load(path) {
            Ok(s) => s,
            Err(ds) => {
                crate::print_diagnostics(&ds, error_format);
                return Err(CliError::Message(format!(
                    "{} error(s) in the configuration `{}`; not starting",
                    ds.len(),
                    path.display()
                )));
            }
        };
        let auth = bursar_auth::Authenticator::new(&site.auth)
            .map_err(|e| CliError::Message(format!("{}: {e}", path.display())))?;
        return Ok((auth, site.clock.max_skew));
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
        let auth = bursar_auth::Authenticator::new(&settings).map_err(|e| CliError::Message(e.to_string()))?;
        return Ok((auth, bursar_config::DEFAULT_MAX_SKEW));
    }
    Ok((bursar_auth::Authenticator::open(), bursar_config::DEFAULT_MAX_SKEW))
}

fn parse_mode(s: &str) -> Result<u32, String> {
    match u32::from_str_radix(s.trim_start_matches("0o"), 8) {
        Ok(m) if m <= 0o777 => Ok(m),
        _ => Err(format!("`{s}` is not a permission mode: write it in octal, e.g. `660` or `600`")),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    Duration::parse(s).map_err(|e| e.to_string())
}

fn std_duration(d: Duration) -> StdDuration {
    StdDuration::from_millis(u64::try_from(d.millis()).unwrap_or(0).max(1))
}

/// Runs the server until SIGTERM or SIGINT.
pub fn run(args: &ServeArgs, error_format: ErrorFormat) -> Result<ExitCode, CliError> {
    let (auth, max_skew) = site_auth(args, error_format)?;
    if let Err(e) = bursar_serve::check_bind(args.listen, &auth) {
        return Err(CliError::Message(e.to_string()));
    }
    let level = match args.log_level {
        tracing_level::Level::Error => tracing::Level::ERROR,
        tracing_level::Level::Warn => tracing::Level::WARN,
        tracing_level::Level::Info => tracing::Level::INFO,
        tracing_level::Level::Debug => tracing::Level::DEBUG,
        tracing_level::Level::Trace => tracing::Level::TRACE,
    };
    let format = match args.log_format {
        LogFormat::Human => bursar_serve::LogFormat::Human,
        LogFormat::Json => bursar_serve::LogFormat::Json,
    };
    bursar_serve::init_logging(format, level);

    let mut config = bursar_serve::Config::new(&args.policies, &args.audit);
    config.durable = !args.fast_commit;
    config.auth = std::sync::Arc::new(auth);
    config.config_file = args.config.clone();
    config.max_skew = max_skew;
    config.build = crate::build::info();
    config.tick = std_duration(args.tick);
    config.snapshot_every = std_duration(args.snapshot_every);
    config.debounce = std_duration(args.debounce);
    config.watch = !args.no_watch;
    config.max_body = args.max_body;
    config.admit_listen = args.admit_listen;
    config.tls =
        args.tls_cert.clone().zip(args.tls_key.clone()).map(|(cert_file, key_file)| bursar_serve::listen::TlsConfig {
            cert_file,
            key_file,
            client_ca: args.tls_client_ca.clone(),
            require_client_cert: args.tls_require_client_cert,
        });
    config.max_connections = args.max_connections;
    config.header_timeout = std_duration(args.header_timeout);
    config.body_timeout = std_duration(args.body_timeout);
    config.socket = args.socket.clone();
    config.socket_mode = args.socket_mode;
    config.witness = args.signing_key.clone().zip(args.witness.clone());
    config.adopt_unsigned = args.adopt_unsigned;
    if let Some(path) = &args.utilisation {
        config.utilisation = Some(
            bursar_serve::utilisation::UtilisationConfig::load(path).map_err(|e| CliError::Message(e.to_string()))?,
        );
    }
    if let Some(path) = &args.notify {
        config.notify = Some(bursar_notify::NotifyConfig::load(path).map_err(|e| CliError::Message(e.to_string()))?);
    }
    if let Some(path) = &args.prices {
        config.prices = Some(bursar_report::Prices::from_file(path).map_err(|e| CliError::Message(e.to_string()))?);
    }
    config.queue = args.queue;
    config.engine = bursar_engine::EngineConfig { dedupe_window: args.dedupe_window, ..Default::default() };
    // The same loader as `check` and `eval`: TOML policies and WebAssembly components.
    let host = bursar_wasm::WasmHost::shared().map_err(|e| CliError::Message(e.to_string()))?;
    let allow_empty = args.allow_empty;
    config.loader = std::sync::Arc::new(move |dir: &std::path::Path| {
        if allow_empty { bursar_loader::load_dir_allowing_empty(dir, host) } else { bursar_loader::load_dir(dir, host) }
    });

    let cluster = args.cluster.as_ref().map(|url| {
        let instance = args.instance.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
            let host: String = host.trim().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            format!("{}-{}", if host.is_empty() { "bursar" } else { &host }, std::process::id())
        });
        let mut c = bursar_cluster::ClusterConfig::new(url.clone(), instance, &args.audit);
        c.partitions = args.partitions;
        c.replicas = args.replicas;
        c.lease_ttl = std_duration(args.lease_ttl);
        c.admit_timeout = std_duration(args.admit_timeout);
        c.dedupe_window = std_duration(args.stream_dedupe_window);
        c
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("bursar-serve")
        .build()
        .map_err(|e| CliError::io("cannot start the async runtime", e))?;
    let port_file = args.port_file.clone();
    let listen = args.listen;
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
