//! `bursar slurm watch|enforce`: the Slurm agents. The command line only; the agents live in the
//! `bursar-slurm` crate, and `integrations/slurm/` holds the `job_submit.lua` hook and the lab scripts
//! (docs/integrations/slurm.md).

use std::path::PathBuf;

use bursar_agent::server::Server;
use bursar_model::Duration;
use bursar_slurm::enforce::EnforceConfig;
use bursar_slurm::slurm::Slurm;
use bursar_slurm::watch::WatchConfig;

use crate::values::{parse_duration, std_duration};
use crate::{CliError, ExitCode};

/// Options of `bursar slurm`.
#[derive(Debug, Clone, clap::Args)]
pub struct SlurmArgs {
    #[command(subcommand)]
    command: SlurmCommand,
}

/// Options both agents share.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Where serve is and how to authenticate (a producer principal's token, a client certificate).
    #[command(flatten)]
    connect: crate::connect::ConnectArgs,
    /// Cluster name, used in event ids and records (keep it stable).
    #[arg(long, default_value = "slurm")]
    cluster: String,
    /// The agent's state file (created if missing; keep it on local disk).
    #[arg(long, value_name = "FILE")]
    state: PathBuf,
    /// Run one pass and exit: one poll (watch), or until caught up with the stream (enforce).
    #[arg(long)]
    once: bool,
    /// The squeue command.
    #[arg(long, default_value = "squeue")]
    squeue: String,
    /// The scancel command.
    #[arg(long, default_value = "scancel")]
    scancel: String,
    /// The scontrol command.
    #[arg(long, default_value = "scontrol")]
    scontrol: String,
    /// Log level: error, warn, info, debug, trace.
    #[arg(long, value_enum, default_value = "info")]
    log_level: crate::serve::tracing_level::Level,
}

#[derive(Debug, Clone, clap::Subcommand)]
enum SlurmCommand {
    /// Report what Slurm queued, allocated and ran for every job job_submit.lua admitted, run by run
    /// (job.queued, job.started with the GPUs allocated, job.requeued, job.finished), polling
    /// `squeue -O` and reading a job's record only when it is new or starts a run.
    ///
    /// Example: bursar slurm watch --cluster lab --state /var/lib/bursar/slurm-watch.json
    Watch {
        #[command(flatten)]
        common: Common,
        /// Time between two polls, at least; a poll that takes longer than a third of it stretches it
        /// to three times the poll. Keep it far below Slurm's MinJobAge and the hook's confirm_within_s.
        #[arg(long, default_value = "2s", value_parser = parse_duration)]
        interval: Duration,
        /// Read the nodes (`scontrol -d show node -o`) every this many polls, and at the first, and
        /// send the pool's inventory (GPUs per type and partition) when it changed; 0: never.
        #[arg(long, default_value_t = 10, value_name = "POLLS")]
        nodes_every: u32,
        /// The region the inventory names (a pool or cluster) [default: the cluster name].
        #[arg(long)]
        region: Option<String>,
        /// A GRES type's GPU type, as the submit hook's `gpu_types` maps it (`h100=H100-SXM`);
        /// repeatable. Without it, the GRES type upper-cased (`h100` is `H100`).
        #[arg(long = "gpu-type", value_name = "GRES=TYPE", value_parser = gres_type)]
        gpu_types: Vec<(String, String)>,
        /// Where to write, at every read of the nodes, the GPUs of each partition's largest node
        /// (`partition<TAB>gpus` lines), which job_submit.lua's `node_gpus_file` reads to reserve what
        /// an `--exclusive` job holds; readable by SlurmUser [default: beside --state, named after it:
        /// /var/lib/bursar/slurm-watch.json → /var/lib/bursar/slurm-watch.node-gpus.tsv].
        #[arg(long, value_name = "FILE")]
        node_gpus_file: Option<PathBuf>,
        /// A MIG GRES type's (or profile's) share of a GPU, as the submit hook's `mig_shares` maps
        /// it (`1g.24gb=1/4`, `a100_1g.10gb=1/7`); repeatable. Without it, a profile's compute slices
        /// over the GPU's seven (over four for the A30's): `1g.10gb` is 1/7.
        #[arg(long = "mig-share", value_name = "TYPE=SHARE", value_parser = mig_share)]
        mig_shares: Vec<(String, bursar_model::Gpus)>,
    },
    /// Follow the decision stream and execute reclaims (scancel of exactly the job, array task or
    /// array named), approvals (scontrol release) and expiries (scancel of a job still held), checking
    /// that Slurm did each.
    ///
    /// Example: bursar slurm enforce --cluster lab --state /var/lib/bursar/slurm-enforce.json --watch-state /var/lib/bursar/slurm-watch.json
    Enforce {
        #[command(flatten)]
        common: Common,
        /// The watcher's state file, read (never written) to find a job's Slurm id without listing the
        /// whole queue; without it every action lists the queue as JSON.
        #[arg(long, value_name = "FILE")]
        watch_state: Option<PathBuf>,
        /// How long to wait for Slurm to show an action done (a cancelled job out of RUNNING, a
        /// released job out of its hold) before the try counts as refused.
        #[arg(long, default_value = "15s", value_parser = parse_duration)]
        verify_within: Duration,
        /// With no state file yet, start after this decision seq (0: the whole stream).
        #[arg(long, default_value_t = 0)]
        start_after: u64,
        /// Tries of a failing Slurm command before the failure is recorded.
        #[arg(long, default_value_t = 5)]
        max_attempts: u32,
        /// Wait after the first failed try; doubles each time.
        #[arg(long, default_value = "1s", value_parser = parse_duration)]
        retry_delay: Duration,
    },
}

/// `h100=H100-SXM`: a GRES type and the GPU type bursar names it by.
fn mig_share(s: &str) -> Result<(String, bursar_model::Gpus), String> {
    let Some((t, v)) = s.split_once('=').filter(|(t, v)| !t.trim().is_empty() && !v.trim().is_empty()) else {
        return Err(format!("`{s}` is not TYPE=SHARE, e.g. `1g.10gb=1/7`"));
    };
    let g = bursar_model::Gpus::parse(v).map_err(|e| e.to_string())?;
    if g.is_zero() || g > 1 {
        return Err(format!("`{v}` is not a share of one GPU (above 0, at most 1)"));
    }
    Ok((t.trim().to_owned(), g))
}

fn gres_type(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((g, t)) if !g.trim().is_empty() && !t.trim().is_empty() => Ok((g.trim().to_owned(), t.trim().to_owned())),
        _ => Err(format!("`{s}` is not GRES=TYPE, e.g. `h100=H100-SXM`")),
    }
}

impl Common {
    fn server(&self) -> Result<Server, CliError> {
        Ok(Server { client: self.connect.client(crate::connect::Fallback::Nothing)? })
    }

    fn slurm(&self) -> Slurm {
        Slurm { squeue: self.squeue.clone(), scancel: self.scancel.clone(), scontrol: self.scontrol.clone() }
    }
}

/// Runs `bursar slurm …`.
pub fn run(args: &SlurmArgs) -> Result<ExitCode, CliError> {
    let fail = |e: bursar_slurm::Error| CliError::Message(e.to_string());
    match &args.command {
        SlurmCommand::Watch { common, interval, nodes_every, region, gpu_types, node_gpus_file, mig_shares } => {
            crate::values::init_agent_logging(common.log_level);
            let mut table = std::collections::BTreeMap::new();
            for (t, g) in mig_shares {
                if table.insert(t.clone(), *g).is_some_and(|before| before != *g) {
                    return Err(CliError::Message(format!("--mig-share gives `{t}` two shares")));
                }
            }
            bursar_slurm::set_mig_shares(table);
            let cfg = WatchConfig {
                server: common.server()?,
                slurm: common.slurm(),
                cluster: common.cluster.clone(),
                state: common.state.clone(),
                interval: std_duration(*interval),
                nodes_every: *nodes_every,
                region: region.clone().unwrap_or_else(|| common.cluster.clone()),
                gpu_types: gpu_types.iter().cloned().collect(),
                node_gpus_file: Some(
                    node_gpus_file.clone().unwrap_or_else(|| bursar_slurm::node_gpus::default_path(&common.state)),
                ),
            };
            let r = bursar_slurm::watch::run(&cfg, common.once).map_err(fail)?;
            if common.once {
                eprintln!(
                    "slurm watch: {} jobs listed, {} events sent ({} already known), {} records read{}, {} ms",
                    r.listed,
                    r.sent,
                    r.duplicates,
                    r.scontrol_calls,
                    if r.dumped { " and the queue as JSON" } else { "" },
                    r.took_ms
                );
            }
            Ok(ExitCode::Ok)
        }
        SlurmCommand::Enforce { common, watch_state, verify_within, start_after, max_attempts, retry_delay } => {
            crate::values::init_agent_logging(common.log_level);
            let cfg = EnforceConfig {
                server: common.server()?,
                slurm: common.slurm(),
                cluster: common.cluster.clone(),
                state: common.state.clone(),
                watch_state: watch_state.clone(),
                verify_within: std_duration(*verify_within),
                start_after: *start_after,
                max_attempts: *max_attempts,
                retry_delay: std_duration(*retry_delay),
            };
            let r = bursar_slurm::enforce::run(&cfg, common.once).map_err(fail)?;
            eprintln!(
                "slurm enforce: {} decisions read, {} actions recorded ({} recorded before), cursor {}",
                r.decisions, r.recorded, r.already_recorded, r.cursor
            );
            Ok(ExitCode::Ok)
        }
    }
}
