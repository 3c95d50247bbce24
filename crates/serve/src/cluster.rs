//! `bursar serve --cluster nats://…`: this instance's part of a bursar cluster on NATS JetStream
//! (`bursar-cluster` does the cluster; this module makes it a [`Backend`] and wires the instance).
//!
//! The doors are single-node serve's ([`router`], [`crate::socket`],
//! `--admit-listen`): the same handlers over [`ClusterBackend`], which
//! - admits by forwarding to the partition's owner (NATS request-reply), answered within
//!   `--admit-timeout`; a 503 with the partition and the cause when no owner answers in time;
//! - takes events by publishing them to the partitions' subjects, answered once stored in the
//!   stream (`accepted`, `duplicates` as the stream found them; their decisions come on the
//!   decisions stream), with `?wait_ms=N` also until their owners applied them;
//! - refuses an event dated beyond the clock bound here, at the front: the partition's owner replays
//!   its stream later, so the bound cannot be its to apply;
//! - streams `GET /v1/decisions` from JetStream, and adds `GET /v1/cluster`: this instance, its
//!   partitions, every partition's owner.
//!
//! A refusal made before the backend (a spent write budget) is counted and logged here, not
//! journaled: a cluster's journal is its partitions' streams, which carry only inputs to apply.
//! Policies load with the same loader as single-node serve, and reload on file changes, SIGHUP
//! and `POST /v1/reload` through the same reloader; quotas scoped by user or tag are checked through
//! the ledger partition (`docs/cluster.md`).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use bursar_auth::Caller;
use bursar_cluster::{Cluster, ClusterConfig, Front, Status};
use bursar_engine::PolicySet;
use bursar_model::Input;
use bursar_model::api::{AdmitReply, ReloadOutcome};
use bursar_session::{Incoming, Refused, RefusedBy};
use tokio::sync::{mpsc, watch};

use crate::backend::{Backend, Fate, Outcome, Submitted};
use crate::reload::{ReloadRequest, SharedStatus};
use crate::respond::{Refusal, json};
use crate::road::Door;
use crate::stream::Format;
use crate::{Config, Ready, ServeError};

/// A cluster instance's front end as a [`Backend`].
pub struct ClusterBackend {
    front: Arc<Front>,
    status: Arc<Status>,
    /// An event dated more than this after the wall clock is refused at the front.
    max_skew: bursar_model::Duration,
    /// The set in force here and the last reload (`/v1/policies`, `/metrics`).
    policy: SharedStatus,
    /// Reload counters.
    metrics: Arc<crate::Metrics>,
    /// Asks the reloader (`POST /v1/reload`).
    reload: mpsc::Sender<ReloadRequest>,
}

impl ClusterBackend {
    /// Why the clock bound refuses `input`, if it does (events only: bursar's own inputs are not
    /// producers').
    fn beyond_clock(&self, input: &Input) -> Option<String> {
        let bound = bursar_session::ClockBound::Wall { skew: self.max_skew };
        bound.refuses(input.time(), None).filter(|_| matches!(input, Input::Event(_)))
    }

    async fn forward(&self, item: Incoming, test_only: bool) -> Result<AdmitReply, Refusal> {
        if let Some(reason) = self.beyond_clock(&item.input) {
            return Err(Refusal::Clock(format!("refused: {reason}")));
        }
        let asked = if test_only { self.front.preview(&item).await } else { self.front.admit(&item).await };
        asked.map_err(|r| Refusal::from_status(r.status, r.error))
    }
}

impl Backend for ClusterBackend {
    fn unavailable(&self) -> Option<String> {
        (!self.front.connected()).then(|| "not connected to NATS; reconnecting".to_owned())
    }

    async fn submit(
        &self,
        items: Vec<Incoming>,
        _caller: &Arc<Caller>,
        wait: Option<Duration>,
    ) -> Result<Submitted, Refusal> {
        let mut outcomes = Vec::with_capacity(items.len());
        let mut publish = Vec::with_capacity(items.len());
        for item in items {
            match self.beyond_clock(&item.input) {
                Some(reason) => outcomes.push(Outcome {
                    line: item.line,
                    id: item.input.id().into_owned(),
                    fate: Fate::Refused(Refused { by: RefusedBy::Clock, reason }),
                }),
                None => publish.push(item),
            }
        }
        let mut applied = None;
        if !publish.is_empty() {
            let published = self
                .front
                .publish(publish)
                .await
                .map_err(|e| Refusal::Unavailable(format!("{e}; resend the events (ids make that safe)")))?;
            let mut at = Vec::new();
            for p in published {
                at.extend(p.at);
                let fate = if p.duplicate { Fate::Duplicate } else { Fate::Accepted(Vec::new()) };
                outcomes.push(Outcome { line: p.line, id: p.id, fate });
            }
            if let Some(within) = wait {
                applied = Some(self.front.wait_applied(&at, within).await);
            }
        }
        outcomes.sort_by_key(|o| o.line);
        Ok(Submitted { outcomes, applied })
    }

    async fn admit(&self, item: Incoming, _caller: &Arc<Caller>) -> Result<AdmitReply, Refusal> {
        self.forward(item, false).await
    }

    async fn preview(&self, item: Incoming) -> Result<AdmitReply, Refusal> {
        self.forward(item, true).await
    }

    async fn record_refusal(&self, item: Incoming, reason: String) {
        // Counted (`bursar_write_budget_refused_total`) and logged by the road; nothing to journal.
        tracing::debug!(id = %item.input.id(), reason, "refusal not journaled in cluster mode");
    }

    fn decisions(&self, after: u64, follow: bool, format: Format) -> Body {
        let rx = self.front.decisions(after, follow);
        let stream =
            futures_util::stream::unfold((rx, false), move |(mut rx, done): (mpsc::Receiver<_>, bool)| async move {
                if done {
                    return None;
                }
                match rx.recv().await {
                    Some(Ok(d)) => {
                        let d: bursar_model::api::Sequenced = d;
                        let frame = crate::stream::frame(format, d.seq, &d.to_json());
                        Some((Ok::<Bytes, Infallible>(frame), (rx, false)))
                    }
                    Some(Err(e)) => Some((Ok(crate::stream::error_frame(format, &e)), (rx, true))),
                    None => None,
                }
            });
        Body::from_stream(stream)
    }

    fn policy_status(&self) -> &SharedStatus {
        &self.policy
    }

    fn reloads(&self) -> &mpsc::Sender<ReloadRequest> {
        &self.reload
    }

    async fn metrics(&self) -> String {
        use std::fmt::Write as _;
        let mut text = self.status.render();
        let m = &self.metrics;
        let _ = writeln!(
            text,
            "# HELP bursar_reloads_total Policy reloads, by outcome.\n# TYPE bursar_reloads_total counter"
        );
        for (label, v) in [("ok", &m.reloads_ok), ("unchanged", &m.reloads_unchanged), ("failed", &m.reloads_failed)] {
            let _ = writeln!(
                text,
                "bursar_reloads_total{{outcome=\"{label}\"}} {}",
                v.load(std::sync::atomic::Ordering::Relaxed)
            );
        }
        let (digest, loaded_at, failed) = self
            .policy
            .read()
            .map(|s| {
                let digest = s.set.as_ref().map(|x| x.digest().to_owned()).unwrap_or_default();
                (digest, s.loaded_at.clone(), s.last.as_ref().is_some_and(|l| l.status == "failed"))
            })
            .unwrap_or_default();
        let loaded_s = bursar_model::Timestamp::parse(&loaded_at).map(|t| t.millis() as f64 / 1e3).unwrap_or(0.0);
        let _ = write!(
            text,
            "# HELP bursar_last_reload_failed 1 when the last reload could not take the policy directory: what is in force is older than the files.\n\
             # TYPE bursar_last_reload_failed gauge\nbursar_last_reload_failed{{part=\"policies\"}} {}\n\
             # HELP bursar_policy_set_info The policy set in force on this instance, by digest (always 1).\n\
             # TYPE bursar_policy_set_info gauge\nbursar_policy_set_info{{digest=\"{}\"}} 1\n\
             # HELP bursar_policy_set_loaded_timestamp_seconds When the set in force was loaded here (Unix time).\n\
             # TYPE bursar_policy_set_loaded_timestamp_seconds gauge\nbursar_policy_set_loaded_timestamp_seconds {loaded_s:.3}\n",
            u8::from(failed),
            digest.replace('\\', "\\\\").replace('"', "\\\""),
        );
        text
    }
}

/// `GET /v1/cluster`: this instance, its partitions, every partition's owner.
pub async fn cluster_view(State(door): State<Door<ClusterBackend>>) -> Response {
    json(StatusCode::OK, &door.backend.status.view())
}

async fn compile(config: &Config) -> Result<PolicySet, ServeError> {
    let (loader, dir) = (config.loader.clone(), config.policies.clone());
    let set = tokio::task::spawn_blocking(move || loader(&dir))
        .await
        .map_err(|e| ServeError::Io { context: "compile the policies".into(), message: e.to_string() })?;
    set.map_err(|errors| ServeError::Policies { dir: config.policies.display().to_string(), errors })
}

/// Runs one cluster instance on `listener` until `shutdown` resolves, then hands its partitions over
/// (a snapshot each, leases deleted) and stops. `ready` is called once the instance is connected and
/// listening, before any request is taken.
pub async fn serve_cluster(
    config: Config,
    mut cluster: ClusterConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ready: impl FnOnce(&Ready) -> Result<(), ServeError>,
) -> Result<(), ServeError> {
    let addr = listener
        .local_addr()
        .map_err(|e| ServeError::Io { context: "read the bound address".into(), message: e.to_string() })?;
    crate::check_bind(addr, &config.auth)?;
    if config.utilisation.is_some() {
        return Err(ServeError::Cluster(
            "`--utilisation` is not available with `--cluster` yet: run the Prometheus source beside one single-node serve, or send `job.sample` events to any instance's POST /v1/events (docs/cluster.md)".into(),
        ));
    }
    let set = Arc::new(compile(&config).await?);
    cluster.audit = config.audit.clone();
    cluster.durable = config.durable;
    cluster.tick = config.tick;
    cluster.snapshot_every = config.snapshot_every;
    cluster.engine = config.engine;
    let (policies_tx, policies_rx) = watch::channel(set.clone());
    let instance = Cluster::start(cluster, policies_rx).await.map_err(|e| ServeError::Cluster(e.to_string()))?;

    // Reloads: file changes, SIGHUP and `POST /v1/reload`, through single-node serve's reloader; a
    // set that does not compile is refused and the one in force stays. Each instance compiles its
    // own copy of the files: the owners it runs take the new set between two batches
    // (docs/cluster.md, "Reloading").
    let started_at = crate::wall_time().to_string();
    let policy: SharedStatus = Arc::new(std::sync::RwLock::new(crate::reload::PolicyStatus {
        set: Some(set.clone()),
        loaded_at: started_at.clone(),
        last: Some(ReloadOutcome {
            ok: true,
            status: "loaded".into(),
            cause: "startup".into(),
            at: started_at,
            digest: set.digest().to_owned(),
            errors: Vec::new(),
            compile_ms: 0.0,
            config: None,
        }),
    }));
    let metrics = Arc::new(crate::Metrics::default());
    let shared_auth: crate::auth::SharedAuth = Arc::new(std::sync::RwLock::new(config.auth.clone()));
    let (reload_tx, reload_rx) = mpsc::channel::<ReloadRequest>(64);
    let triggers = crate::reload::Triggers::start(&config.policies, config.watch, config.debounce, &reload_tx)?;
    let reloader = tokio::spawn(
        crate::reload::Reloader {
            dir: config.policies.clone(),
            loader: config.loader.clone(),
            target: crate::reload::Target::Instances(policies_tx),
            status: policy.clone(),
            metrics: metrics.clone(),
            config: config.config_file.clone().map(|p| (p, shared_auth.clone())),
            site: Arc::new(std::sync::Mutex::new(
                config.config_file.as_deref().and_then(|p| bursar_config::load(p).ok()),
            )),
        }
        .run(reload_rx),
    );
    let backend = ClusterBackend {
        front: instance.front.clone(),
        status: instance.status.clone(),
        max_skew: config.max_skew,
        policy,
        metrics: metrics.clone(),
        reload: reload_tx.clone(),
    };
    let door = crate::doors::door(&config, backend, shared_auth, metrics);
    let (stop_tx, stop_rx) = watch::channel(false);
    let doors = crate::doors::Doors::open(&config, &door, router, stop_rx.clone()).await?;
    ready(&Ready { addr, admit: doors.admit_addr })?;
    tracing::info!(%addr, partitions = instance.front.partitions(), digest = set.digest(), "cluster instance listening");
    crate::systemd::notify("READY=1");
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    doors.serve(listener, stop_rx).await;
    triggers.stop();
    drop(reload_tx);
    reloader.abort();
    let _ = tokio::time::timeout(Duration::from_secs(30), instance.shutdown()).await;
    tracing::info!("cluster instance stopped");
    Ok(())
}

/// A cluster instance's listener: the common routes and `GET /v1/cluster`.
pub fn router(
    door: Door<ClusterBackend>,
    limits: crate::listen::Limits,
    counters: Arc<crate::listen::ListenCounters>,
) -> axum::Router {
    let api = crate::router::common::<ClusterBackend>().merge(crate::layers::needing(
        bursar_auth::Power::Read,
        axum::Router::new().route("/v1/cluster", axum::routing::get(cluster_view)),
    ));
    crate::router::wrap(
        door,
        api,
        None,
        limits,
        counters,
        "no such route in cluster mode: /v1/admit, /v1/events, /v1/decisions, /v1/cluster, /v1/policies, /v1/reload, /healthz, /metrics (docs/cluster.md)",
    )
}
