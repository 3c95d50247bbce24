//! Opening the doors of a server, single node or cluster alike: the main listener with its router,
//! the scheduler's own listener (`--admit-listen`), the event socket (`--socket`), each under the
//! listener limits and TLS of the configuration, each over the same [`Door`].

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::backend::Backend;
use crate::listen::{Limits, ListenCounters, Tls};
use crate::metrics::Metrics;
use crate::road::Door;
use crate::{Config, ServeError};

/// The [`Door`] of `backend` under `config`'s limits, with the authenticator in force.
pub fn door<B: Backend>(config: &Config, backend: B, auth: crate::auth::SharedAuth, metrics: Arc<Metrics>) -> Door<B> {
    Door {
        backend: Arc::new(backend),
        auth: crate::auth::AuthState { auth, metrics: metrics.clone(), failures: Arc::default() },
        budgets: Arc::default(),
        metrics,
        max_line: config.max_body,
        origins: config.origins.clone().into(),
    }
}

/// The event socket's caps under `config`: the listeners', per peer UID.
pub fn socket_limits(config: &Config) -> crate::socket::SocketLimits {
    crate::socket::SocketLimits {
        max_connections: config.max_connections,
        max_per_uid: config.max_connections_per_address,
        max_unfinished_per_uid: config.max_unfinished_per_address,
    }
}

/// The listener limits of `config`.
pub fn limits(config: &Config) -> Limits {
    Limits {
        max_connections: config.max_connections,
        max_per_address: config.max_connections_per_address,
        max_unfinished_per_address: config.max_unfinished_per_address,
        header_timeout: config.header_timeout,
        body_timeout: config.body_timeout,
        max_body: config.max_body,
    }
}

/// The doors, open and not yet serving.
pub struct Doors {
    main: Router,
    main_counters: Arc<ListenCounters>,
    admit: Option<(TcpListener, Router)>,
    admit_counters: Arc<ListenCounters>,
    socket: Option<tokio::task::JoinHandle<()>>,
    limits: Limits,
    tls: Option<Tls>,
    /// Where `--admit-listen` listens, if it does.
    pub admit_addr: Option<SocketAddr>,
}

impl Doors {
    /// Binds the admission listener and the socket of `config` over `door`, and builds the main
    /// router with `main`. The socket serves from now on; the listeners once [`Doors::serve`] runs.
    pub async fn open<B: Backend>(
        config: &Config,
        door: &Door<B>,
        main: fn(Door<B>, Limits, Arc<ListenCounters>) -> Router,
        stop: watch::Receiver<bool>,
    ) -> Result<Doors, ServeError> {
        let limits = limits(config);
        let tls = config
            .tls
            .as_ref()
            .map(Tls::load)
            .transpose()
            .map_err(|e| ServeError::Io { context: "load the TLS settings".into(), message: e.to_string() })?;
        let (main_counters, admit_counters) = (door.metrics.listener.clone(), door.metrics.admit_listener.clone());
        let admit = match config.admit_listen {
            Some(a) => {
                crate::check_bind(a, &config.auth)?;
                let l = TcpListener::bind(a).await.map_err(|e| ServeError::Io {
                    context: format!("listen on `{a}` (--admit-listen)"),
                    message: e.to_string(),
                })?;
                Some((l, crate::router::admit_only(door.clone(), limits, admit_counters.clone())))
            }
            None => None,
        };
        let admit_addr = admit.as_ref().and_then(|(l, _)| l.local_addr().ok());
        let socket = match &config.socket {
            Some(path) => Some(
                crate::socket::listen(path, door.clone(), config.socket_mode, socket_limits(config), stop).map_err(
                    |e| ServeError::Io {
                        context: format!("listen on the socket `{}`", path.display()),
                        message: e.to_string(),
                    },
                )?,
            ),
            None => None,
        };
        Ok(Doors {
            main: main(door.clone(), limits, main_counters.clone()),
            main_counters,
            admit,
            admit_counters,
            socket,
            limits,
            tls,
            admit_addr,
        })
    }

    /// Serves the main `listener` and the admission listener until `stop` turns true and their
    /// requests in flight are done; then lets the socket's connections finish (at most 10 s).
    pub async fn serve(self, listener: TcpListener, stop: watch::Receiver<bool>) {
        let Doors { main, main_counters, admit, admit_counters, socket, limits, tls, .. } = self;
        let admit_task = admit.map(|(l, app)| {
            tokio::spawn(crate::listen::serve(l, app, limits, admit_counters, tls.clone(), stop.clone()))
        });
        crate::listen::serve(listener, main, limits, main_counters, tls, stop).await;
        if let Some(t) = admit_task {
            let _ = t.await;
        }
        if let Some(t) = socket {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(10), t).await;
        }
    }
}
