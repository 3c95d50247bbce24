//! What every scheduler agent shares: the Slurm agents (`bursar-slurm`) and the Kubernetes agent
//! (`bursar-kube`) talk to `bursar serve` the same way, keep their progress the same way and record
//! what they did to the scheduler the same way. This crate is that common part, so each scheduler
//! crate holds only what is particular to its scheduler.
//!
//! - [`server`]: posting events and action records (`POST /v1/events`) and following decisions
//!   (`GET /v1/decisions?after=SEQ`) through the typed client.
//! - [`state`]: small persisted state files, rewritten atomically (a crash leaves the old or the new
//!   state, never half of one).
//! - [`record`]: the action record of an enforcement (`action.executed` / `action.failed`), naming
//!   the decision it carried out, with the scheduler's own identifiers as added fields.
//! - [`follow`]: the enforcer's loop: follow the decision stream from a persisted cursor, find what
//!   each decision asks of the scheduler ([`follow::ask`]), hand that to the scheduler's executor,
//!   record each action before the cursor moves past it, and reconnect with a back-off.
//! - [`ids`]: the `<namespace>:<id>` form in which serve keeps every id a sender posts
//!   (`<principal>:<id>`, `~<person>:<id>`).
//!
//! Boundaries: no scheduler commands or API clients (those stay in the scheduler crates), no policy
//! semantics (serve decides), no HTTP server.

pub mod follow;
pub mod ids;
pub mod record;
pub mod server;
pub mod state;

/// What can stop an agent or one of its steps, as far as the shared parts go.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// bursar serve could not be reached or refused a request.
    #[error("bursar serve at `{addr}`: {message}")]
    Server {
        /// The server address.
        addr: String,
        /// What went wrong.
        message: String,
    },
    /// A state file could not be read or written.
    #[error("state file `{path}`: {message}")]
    State {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
