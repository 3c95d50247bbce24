//! bursar on Kubernetes: the agents that make bursar's decisions real on a cluster, beside
//! `bursar serve`, as `bursar-slurm`'s do on Slurm. Each is a `bursar kube …` subcommand:
//!
//! - **checks** ([`checks`]): the controller of a Kueue `AdmissionCheck`, a kube-runtime
//!   `Controller` of Workloads. For every Workload whose check is `Pending` with quota reserved it
//!   builds the `job.submitted` ([`submit`]), asks serve's `/v1/admit`, and writes the answer back
//!   through the Workload's status subresource (allow → `Ready`, deny → `Rejected`, require
//!   approval → stays `Pending` "waiting for approval", defer → `Pending` until the time, then
//!   `Ready`).
//! - **webhook** ([`webhook`]): a mutating admission webhook (AdmissionReview v1 over TLS) for
//!   clusters without Kueue: Jobs, bare Pods, JobSets and Kubeflow jobs are denied with bursar's
//!   reason, or admitted and labelled with their bursar job, or created suspended (a Pod: gated)
//!   until approved; `userInfo` is the user.
//! - **watch** ([`watch`]): kube-runtime watchers of the Workloads (or the admitted objects) and their Pods,
//!   turned into `job.started` (with the GPUs the pods hold), `job.requeued` and `job.finished`
//!   ([`lifecycle`]), restart-safe through a state file and derived event ids.
//! - **enforce** ([`enforce`]): `bursar-agent`'s decision follower with a Kubernetes executor:
//!   reclaim deactivates the Workload (`spec.active: false`) or suspends the object, an approval
//!   sets the check `Ready` or resumes the object, a rejection sets it `Rejected` or deletes the
//!   object; each action recorded in the audit log, failures included.
//!
//! Boundaries: no policy semantics (serve decides); talking to serve, state files, action records
//! and the decision follower (which decision asks what) are `bursar-agent`'s; the API server is
//! reached only through kube-rs, and followed only through kube-runtime's watchers ([`watching`]).
//! Utilisation is not here: serve's Prometheus source maps dcgm-exporter's `namespace`/`pod` labels
//! with the pods named by `job.started`.
//!
//! One async style per agent: `checks`, `watch` and `webhook` are async (tokio, under kube-runtime
//! or hyper), and reach serve's blocking client only through [`serve`]; `enforce` is blocking (the
//! follower it shares with Slurm's enforcer) and runs each try's Kubernetes calls on the runtime in
//! one place. Each agent's module says which.
//!
//! Layout: [`kueue`] Kueue's v1beta1 types; [`inventory`] ClusterQueues and nodes →
//! `pool.inventory`; [`kinds`] the object kinds as JSON; [`gpus`] how many GPUs a pod asks for (MIG
//! slices at their share); [`submit`] object → `job.submitted`; [`lifecycle`] what to send when
//! (pure); [`events`] the v1 events; [`watching`] the watchers' settings; [`serve`] serve from async
//! code; [`client`] connecting to the API server; then the four agents.

pub mod checks;
pub mod client;
pub mod enforce;
pub mod events;
pub mod gpus;
pub mod inventory;
pub mod kinds;
pub mod kueue;
pub mod lifecycle;
pub mod review;
pub mod serve;
pub mod submit;
pub mod watch;
pub mod watching;
pub mod webhook;

/// The `spec.controllerName` of bursar's Kueue AdmissionChecks.
pub const CONTROLLER_NAME: &str = "bursar.dev/admission-check";

/// What can stop an agent or one of its steps.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The Kubernetes API server refused a request or could not be reached.
    #[error("Kubernetes API: {what}: {source}")]
    Kube {
        /// What was being done.
        what: String,
        /// kube-rs's error.
        source: Box<kube::Error>,
    },
    /// The client could not be configured (kubeconfig, in-cluster service account).
    #[error(
        "Kubernetes client: {0}\n  help: run inside the cluster with a service account, or give --kubeconfig FILE (or KUBECONFIG)"
    )]
    Config(String),
    /// A setting is unusable.
    #[error("{0}")]
    Settings(String),
    /// The webhook's listener or TLS files.
    #[error("webhook: {0}")]
    Webhook(String),
    /// serve or a state file (the parts every agent shares).
    #[error(transparent)]
    Agent(#[from] bursar_agent::Error),
    /// A call to serve on tokio's blocking pool did not finish (it panicked, or the runtime is
    /// shutting down).
    #[error("{what} to serve did not finish: {source}")]
    Interrupted {
        /// The call.
        what: &'static str,
        /// tokio's error.
        source: tokio::task::JoinError,
    },
    /// What an agent follows stopped (its watches or controllers ended).
    #[error("{0} ended")]
    Stopped(&'static str),
}

impl Error {
    /// Wraps a kube-rs error with what was being done.
    pub fn kube(what: impl Into<String>, e: kube::Error) -> Error {
        Error::Kube { what: what.into(), source: Box::new(e) }
    }

    /// Whether it is the API server's `409 Conflict` (a stale `resourceVersion`).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Kube { source, .. } if matches!(source.as_ref(), kube::Error::Api(s) if s.code == 409))
    }

    /// Whether it is the API server's `404 Not Found`.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Kube { source, .. } if matches!(source.as_ref(), kube::Error::Api(s) if s.code == 404))
    }
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
