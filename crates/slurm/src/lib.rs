//! bursar's Slurm agents: the two long-lived processes that sit beside `slurmctld` and `bursar serve`
//! and make bursar's decisions real on a Slurm cluster (the third piece, admission, is
//! `integrations/slurm/job_submit.lua`, which runs inside slurmctld).
//!
//! - **watch** ([`watch`]): polls `squeue --json --states=all` and sends `job.started` and
//!   `job.finished` for every job that `job_submit.lua` admitted, carrying both bursar's job id (read
//!   from the job's AdminComment `bursar_job=…`) and Slurm's job id (`slurm_job_id`), so the audit log
//!   links the two.
//! - **enforce** ([`enforce`]): follows `GET /v1/decisions` from a persisted cursor and executes what a
//!   decision asks of Slurm: `scancel` on reclaim (and on a deny that resolves a held job), `scontrol
//!   release` on the approval of a held job. Every action, done or failed, is recorded in the audit log
//!   as an event sent to serve ([`bursar_agent::record::Record`]).
//!
//! Both are restart-safe by construction: their event ids are derived from Slurm's job id or bursar's
//! decision id, so a resend after a crash is dropped by serve's dedupe, and each action first looks at
//! the job's current state, so repeating it does nothing twice.
//!
//! Boundaries: no policy semantics (serve decides), no HTTP server; Slurm is reached only through its
//! commands (`squeue`, `scancel`, `scontrol`), which [`slurm::Slurm`] runs. What every scheduler's
//! agent shares (talking to serve, state files, action records, the decision follower) is
//! `bursar-agent`'s.
//!
//! Layout:
//! - [`slurm`]: the Slurm commands and the parser of `squeue --json`.
//! - [`events`]: the v1 events the agents send.
//! - [`state`]: what the watcher remembers between polls (a `bursar-agent` state file).
//! - [`watch`], [`enforce`]: the two agents.

pub mod enforce;
pub mod events;
pub mod slurm;
pub mod state;
pub mod watch;

/// What can stop an agent or one of its steps.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Slurm command could not run or failed.
    #[error("`{command}` failed: {message}")]
    Command {
        /// The command line.
        command: String,
        /// Its error output or the reason it could not start.
        message: String,
    },
    /// `squeue --json` printed something that is not its JSON.
    #[error(
        "cannot read the output of `squeue --json`: {0}\n  help: this needs Slurm 21.08 or later built with its JSON (openapi) plugins"
    )]
    Squeue(String),
    /// serve or a state file (the parts every agent shares).
    #[error(transparent)]
    Agent(#[from] bursar_agent::Error),
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
