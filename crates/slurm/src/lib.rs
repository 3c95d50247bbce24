//! bursar's Slurm agents: the two long-lived processes that sit beside `slurmctld` and `bursar serve`
//! and make bursar's decisions real on a Slurm cluster (the other pieces run inside Slurm:
//! `integrations/slurm/job_submit.lua` asks for every admission inside slurmctld, and
//! `integrations/slurm/cli_filter.lua` marks `--test-only` submissions inside sbatch/srun/salloc).
//!
//! - **watch** ([`watch`]): polls the queue cheaply (`squeue -O`, a few fields a job) and reports
//!   what Slurm queued, allocated and ran, run by run: `job.queued` for every admitted job it first
//!   sees, `job.started` with the GPUs Slurm allocated (read from the job's record when a run
//!   starts), `job.requeued` when a run ends and the job waits again, `job.finished` only for
//!   Slurm's final states; array tasks as children of their array. Each event carries bursar's job
//!   id (read once from the AdminComment `bursar_job=…`) and Slurm's (`slurm_job_id`). Every few
//!   polls it reads the nodes too and sends `pool.inventory` when the GPUs per type and partition
//!   changed, and writes each partition's largest node's GPUs for the hook's `--exclusive`.
//! - **enforce** ([`enforce`]): follows `GET /v1/decisions` from a persisted cursor and executes what a
//!   decision asks of Slurm: `scancel` on reclaim (exactly the job, array task or whole array named),
//!   `scancel` of a job still held for approval on a rejection or expiry, `scontrol release` on an
//!   approval; it checks afterwards that Slurm did it. Every action, done or failed, is recorded in
//!   the audit log as an event sent to serve ([`bursar_agent::record::Record`]).
//!
//! Both are restart-safe by construction: their event ids are derived from Slurm's ids (and run) or
//! bursar's decision id, so a resend after a crash is dropped by serve's dedupe, and each action first
//! looks at the job's current state, so repeating it does nothing twice.
//!
//! Boundaries: no policy semantics (serve decides), no HTTP server; Slurm is reached only through its
//! commands (`squeue`, `scontrol`, `scancel`), which [`slurm::Slurm`] runs. What every scheduler's
//! agent shares (talking to serve, state files, action records, the decision follower) is
//! `bursar-agent`'s.
//!
//! Layout:
//! - [`queue`]: the rows of a poll (`squeue -O`) and what each row is (job, array task, array).
//! - [`detail`]: a job's record (`scontrol show job -d -o`, or `squeue --json`): bursar's markers and
//!   the GPUs allocated; what user text could forge is never taken from the text form.
//! - [`slurm`]: running the commands, and choosing between per-job reads and one JSON dump.
//! - [`events`]: the v1 events the watcher sends.
//! - [`nodes`]: the pool's inventory from Slurm's nodes (`scontrol -d show node -o`), which the
//!   watcher sends as `pool.inventory` when it changes.
//! - [`node_gpus`]: the GPUs of each partition's largest node, which the watcher writes to a file for
//!   `job_submit.lua` (what an `--exclusive` job holds).
//! - [`state`]: what the watcher remembers between polls (a `bursar-agent` state file, versioned).
//! - [`watch`], [`enforce`]: the two agents.
//!
//! GPUs are counted as [`bursar_model::Gpus`]: a GRES type naming a MIG profile (`gpu:1g.10gb:2`) is
//! its share of a GPU ([`gres_share`]: two `1g.10gb` are 2/7) wherever a job's GPUs are read; the
//! node-level figures that stay whole numbers (the inventory's rows, the `--exclusive` file) say how
//! they round.

pub mod detail;
pub mod enforce;
pub mod events;
pub mod node_gpus;
pub mod nodes;
pub mod queue;
pub mod slurm;
pub mod state;
pub mod watch;

/// The site's table of MIG shares (`bursar slurm watch --mig-share TYPE=SHARE`, the submit hook's
/// `mig_shares`): set once, at the start of the process, before any record is read.
static MIG_SHARES: std::sync::OnceLock<std::collections::BTreeMap<String, bursar_model::Gpus>> =
    std::sync::OnceLock::new();

/// Sets the site's MIG shares for this process: a GRES type (`a100_1g.10gb`) or a profile (`1g.10gb`)
/// to the share of a GPU one of it is, as the submit hook's `mig_shares` maps them. Only the first
/// call counts; false when the table was already set.
pub fn set_mig_shares(table: std::collections::BTreeMap<String, bursar_model::Gpus>) -> bool {
    MIG_SHARES.set(table).is_ok()
}

/// What one GPU of a `gpu` GRES type is to bursar: the site's share for the type or its profile
/// ([`set_mig_shares`]), else its MIG share when the type names a MIG profile (`1g.10gb`, AutoDetect's
/// `a100_1g.10gb`: 1/7; the A30's `1g.6gb`: 1/4; [`bursar_model::mig_share`]), else a whole GPU
/// (`h100`, untyped). The submit hook counts a request the same way, in the same order.
pub fn gres_share(gres_type: &str) -> bursar_model::Gpus {
    if let Some(table) = MIG_SHARES.get().filter(|t| !t.is_empty()) {
        if let Some(g) = table.get(gres_type) {
            return *g;
        }
        if let Some((slices, mem)) = bursar_model::gpus::mig_profile(gres_type)
            && let Some(g) = table.get(&format!("{slices}g.{mem}gb"))
        {
            return *g;
        }
    }
    bursar_model::mig_share(gres_type).unwrap_or(bursar_model::Gpus::whole(1))
}

/// `count` GPUs of a `gpu` GRES type, counted as [`gres_share`] says: `2` of `1g.10gb` are 2/7.
pub fn gres_gpus_of(gres_type: &str, count: u32) -> bursar_model::Gpus {
    gres_share(gres_type).saturating_mul(count)
}

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
    /// `squeue -O` printed a line that is not one of the rows asked for.
    #[error(
        "cannot read the output of `squeue -O`: {0}\n  help: the watcher needs Slurm 21.08 or later; run `squeue -h --states=all -O \"JobID:|,State:|\"` to see what it prints"
    )]
    Queue(String),
    /// `squeue --json` printed something that is not its JSON.
    #[error(
        "cannot read the output of `squeue --json`: {0}\n  help: this needs Slurm 21.08 or later built with its JSON (openapi) plugins"
    )]
    Squeue(String),
    /// Slurm did not do what a command asked (22.05's `scancel` exits 0 even then).
    #[error("Slurm refused: {0}")]
    Refused(String),
    /// serve or a state file (the parts every agent shares).
    #[error(transparent)]
    Agent(#[from] bursar_agent::Error),
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use bursar_model::Gpus;

    /// The site's table comes first, by type and then by profile, as the hook's `mig_shares`; the
    /// built-in share otherwise. (The table is the process's: the keys here are used by no other test.)
    #[test]
    fn a_site_table_overrides_the_built_in_share() {
        let quarter = Gpus::fraction(1, 4).unwrap_or(Gpus::ZERO);
        let table =
            [("lab_small".to_owned(), Gpus::fraction(1, 7).unwrap_or(Gpus::ZERO)), ("2g.48gb".to_owned(), quarter)];
        assert!(super::set_mig_shares(table.into_iter().collect()));
        assert_eq!(super::gres_share("lab_small").to_string(), "1/7", "a site's own type name");
        assert_eq!(super::gres_share("x9_2g.48gb").to_string(), "1/4", "by its profile");
        assert_eq!(super::gres_share("3g.40gb").to_string(), "3/7", "built in");
        assert_eq!(super::gres_share("h100"), Gpus::whole(1));
        assert!(!super::set_mig_shares(Default::default()), "set once");
    }
}
