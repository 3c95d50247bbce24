//! bursar serve, from the async agents (`checks`, `watch`, `webhook`): their one way to it.
//!
//! Those agents are async: kube-rs, kube-runtime and hyper run on tokio. serve's client is
//! `bursar-agent`'s [`Server`] (over `bursar-client` and `bursar-http`), blocking, the one every
//! agent of every scheduler shares. They meet here and nowhere else: each call runs on tokio's
//! blocking pool, so a slow serve holds a pool thread, never a runtime worker, and the other
//! Workloads, watches and webhook requests go on. `enforce` is the other way round (a blocking
//! agent that runs its Kubernetes calls on the runtime) and does not use this module.

use bursar_agent::server::{Posted, Server};
use bursar_model::api::AdmitReply;
use bursar_model::{Event, Input};

use crate::{Error, Result};

/// serve, asked from async code.
#[derive(Debug, Clone)]
pub struct Serve {
    server: Server,
}

impl Serve {
    /// serve at `server`.
    pub fn new(server: Server) -> Serve {
        Serve { server }
    }

    /// The admission decision of one `job.submitted` ([`Server::admit`]).
    pub async fn admit(&self, submitted: Event) -> Result<AdmitReply> {
        let server = self.server.clone();
        off_runtime("an admission", move || server.admit_with_estimate(&submitted)).await
    }

    /// What a submission would be answered now, recorded nowhere ([`Server::preview`]).
    pub async fn preview(&self, submitted: Event) -> Result<AdmitReply> {
        let server = self.server.clone();
        off_runtime("a preview", move || server.preview(&submitted)).await
    }

    /// Posts inputs ([`Server::post`]).
    pub async fn post(&self, inputs: Vec<Input>) -> Result<Posted> {
        let server = self.server.clone();
        off_runtime("a post of events", move || server.post(&inputs)).await
    }
}

/// Runs the blocking call `f` on tokio's blocking pool.
async fn off_runtime<T: Send + 'static>(
    what: &'static str,
    f: impl FnOnce() -> bursar_agent::Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|source| Error::Interrupted { what, source })?.map_err(Error::from)
}
