//! `bursar`: policy-as-code for shared GPU pools. A thin `main` over the `bursar` library: parse the
//! arguments, run the subcommand, map the outcome to an exit code.

use std::path::PathBuf;
use std::process::ExitCode as ProcessExit;

use bursar::values::parse_duration;
use bursar::{CliError, ErrorFormat, ExitCode};
use bursar_model::Duration;
use clap::{Parser, Subcommand};

// mimalloc rather than the system allocator: the engine allocates a few small strings per decision
// (ids, reasons), and glibc's malloc/free were a quarter of the instructions of an admission
// (docs/performance.md, "Admission: where the time goes").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// bursar: a policy engine that decides how a shared GPU pool is spent.
///
/// Policies are TOML files (and WebAssembly components) in a directory; events are JSON lines from the
/// scheduler and billing system; decisions (allow, deny, require_approval, defer, reclaim, alert) come
/// out as JSON lines. See docs/policy-language.md and docs/wire-format.md.
#[derive(Debug, Parser)]
#[command(name = "bursar", version = bursar::build::LINE, propagate_version = true)]
struct Cli {
    /// How errors are printed.
    #[arg(long, global = true, value_enum, default_value_t = ErrorFormat::Human)]
    error_format: ErrorFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate every policy file in a directory; exit 1 if any has an error.
    ///
    /// Every error in every file is reported with file:line:col, the offending line and a hint.
    Check {
        /// The policy directory (or a single policy file).
        dir: PathBuf,
        /// Also name the quotas `bursar serve --cluster` checks through its ledger partition: scoped
        /// by user or tag, their ledgers span projects and so partitions (docs/cluster.md).
        #[arg(long)]
        cluster: bool,
    },
    /// Run policies over an event file (or stdin) and print decisions as JSON lines.
    ///
    /// Example: bursar eval --policies policies --events examples/events.jsonl
    Eval {
        /// The policy directory.
        #[arg(long)]
        policies: PathBuf,
        /// The events, one JSON object per line; `-` reads stdin.
        #[arg(long)]
        events: PathBuf,
        /// How long event ids are remembered to drop resent events (e.g. `24h`).
        #[arg(long, default_value = "24h", value_parser = parse_duration)]
        dedupe_window: Duration,
        /// Print the summary as JSON on stderr instead of a sentence.
        #[arg(long)]
        summary_json: bool,
        /// Log every event and decision to this SQLite audit database; a decision is printed only
        /// after it is committed there.
        #[arg(long, value_name = "FILE")]
        audit: Option<PathBuf>,
        /// With --audit: `durable` (fsync each group commit) or `fast` (may lose the last few ms on power loss).
        #[arg(long, value_enum, default_value_t = bursar::audit::DurabilityArg::Durable, requires = "audit")]
        durability: bursar::audit::DurabilityArg,
        /// The longest event line accepted, in bytes (longer lines are reported and skipped); default 64 MiB.
        #[arg(long, value_name = "BYTES")]
        max_line: Option<usize>,
        /// Evaluate with a policy directory that holds no policy (every job is allowed).
        #[arg(long)]
        allow_empty: bool,
        /// With --audit and --witness: sign the log's head with this Ed25519 key (from `bursar audit
        /// keygen`) after every commit, so `bursar audit verify --witness` catches truncation and re-hashing.
        #[arg(long, value_name = "FILE", requires_all = ["audit", "witness"])]
        signing_key: Option<PathBuf>,
        /// With --signing-key: append each signed head to this file, kept where the database's editors
        /// cannot write (see docs/audit.md, "Signed heads").
        #[arg(long, value_name = "FILE", requires_all = ["audit", "signing_key"])]
        witness: Option<PathBuf>,
        /// With --signing-key: sign even if the log holds writes no signed head covers (a run that
        /// stopped before signing them), recording the adoption in the log; without it such a log
        /// is refused (docs/audit.md, "Signed heads").
        #[arg(long, requires = "signing_key")]
        adopt_unsigned: bool,
        /// How far one event may move the event clock.
        #[command(flatten)]
        clock: bursar::eval::ClockArgs,
    },
    /// Query, explain, verify, prune and summarise an audit database; sign its head.
    ///
    /// Example: bursar audit --db audit.db explain j42
    Audit(bursar::audit::AuditArgs),
    /// Check an installation: configuration, policies, audit log, keys, Prometheus, notices, cluster.
    ///
    /// Example: bursar doctor --config /etc/bursar/bursar.toml
    Doctor(bursar::doctor::DoctorArgs),
    /// Check the site's configuration file, or show the settings serve would run with.
    ///
    /// Example: bursar config check /etc/bursar/bursar.toml
    Config(bursar::config::ConfigArgs),
    /// Credentials for `bursar serve`: make a token and the configuration line that lets it in.
    ///
    /// Example: bursar auth token --name slurmctld --role scheduler --jobs 'slurm-*' --out /etc/slurm/bursar.token
    Auth(bursar::auth::AuthArgs),
    /// Convert a cluster trace (philly, openb, sacct) or a cloud bill (FOCUS CSV) to v1 events on
    /// stdout; the report goes to stderr.
    ///
    /// A bill becomes one `billing.charge` per line, attributed to the job or project its tags name (or
    /// to the `unattributed` account, which no quota limits); a line that cannot be read is refused
    /// with its line and column and the rest goes in; importing the same or an overlapping bill again
    /// changes nothing (each line's id is a hash of its values).
    ///
    /// Example: bursar import philly tests/data/philly/sampled_jobs.json | bursar eval --policies policies --events -
    ///
    /// Example: bursar import bill examples/bill.csv --mapping examples/bill-mapping.toml | bursar eval --policies policies --events - --audit audit.db
    Import {
        /// The trace format.
        #[arg(value_enum)]
        format: bursar::import::Format,
        /// The trace file.
        file: PathBuf,
        /// GPU duty-cycle series (Alibaba GenAI CSV, or its .tar.gz) to attach as job.sample events.
        #[arg(long)]
        util: Option<PathBuf>,
        /// Seed of the job-to-series rule (see docs/importers.md).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Time between two utilisation samples of a running job (with --util).
        #[arg(long, default_value = "10m", value_parser = parse_duration)]
        sample_every: Duration,
        /// Philly only: declare image, data and script ready on every job (the trace has no readiness).
        #[arg(long)]
        assume_ready: bool,
        /// With --util: attach seeded, MODELLED throughput (`modelled-tokens/s`) to each sample, and
        /// model the GPU type and configuration the trace lacks (see docs/importers.md).
        #[arg(long, requires = "util")]
        model_throughput: bool,
        /// Bill only: a mapping file for an export that is not FOCUS, or to give SKUs and resources
        /// their GPU type and count (see docs/importers.md).
        #[arg(long, value_name = "FILE")]
        mapping: Option<PathBuf>,
    },
    /// Generate a synthetic v1 event stream (seeded, streaming) on stdout.
    ///
    /// Example: bursar gen --jobs 1000000 --projects 20 --seed 7 > events.jsonl
    Gen {
        /// Jobs to submit.
        #[arg(long)]
        jobs: u64,
        /// Projects to spread them over.
        #[arg(long, default_value_t = 8)]
        projects: u32,
        /// Seed: the same seed gives the same stream.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Time between two utilisation samples of a running job.
        #[arg(long, default_value = "10m", value_parser = parse_duration)]
        sample_every: Duration,
    },
    /// Run the policy tests (`*.test.toml`) under a policy directory; exit 1 if any case fails.
    ///
    /// Example: bursar test policies --coverage --min-coverage 80
    Test(bursar::test::TestArgs),
    /// Re-evaluate history under a candidate policy set and report what would have changed.
    ///
    /// Example: bursar replay --policies policies-new --events history.jsonl --baseline policies
    Replay(bursar::replay::ReplayArgs),
    /// Normalise the layout of TOML policy files, keeping every comment; --check for CI.
    Fmt(bursar::tomlfmt::FmtArgs),
    /// Run the live engine: events in over HTTP, admissions answered, decisions streamed, hot reload.
    ///
    /// Example: bursar serve --policies policies --audit audit.db --listen 127.0.0.1:7878
    Serve(Box<bursar::serve::ServeArgs>),
    /// Slurm agents: `watch` sends job starts and ends, `enforce` executes reclaims and approvals.
    ///
    /// Example: bursar slurm enforce --cluster lab --state /var/lib/bursar/slurm-enforce.json
    Slurm(bursar::slurm::SlurmArgs),
    /// Kubernetes agents: the Kueue admission check, the admission webhook, `watch` (job starts and
    /// ends from the API server) and `enforce` (reclaims and approvals).
    ///
    /// Example: bursar kube checks --cluster gpu-a --token-file /run/secrets/bursar/token
    Kube(bursar::kube::KubeArgs),
    /// What waits for a person: jobs held for an approval, idle jobs reclaimed unless kept alive.
    ///
    /// Example: bursar pending --server 127.0.0.1:7878
    Pending(bursar::people::PendingArgs),
    /// When a job would start, before submitting it: per region and queue of that GPU type,
    /// simulated from the running jobs' ends (predicted from their owners' history) and the queue
    /// ahead, with a range (docs/estimate.md). Needs serve's `read` power.
    ///
    /// Example: bursar estimate --gpus 8 --gpu-type H100 --hours 12 --region cn-north
    Estimate(bursar::people::EstimateArgs),
    /// Approve a job held for approval (as `--as NAME`, default $USER; only its approvers may).
    ///
    /// Example: bursar approve j42 --as bob
    Approve(bursar::people::ApproveArgs),
    /// Reject a job held for approval, saying why.
    ///
    /// Example: bursar reject j42 --reason "split it into 8-GPU runs first" --as bob
    Reject(bursar::people::RejectArgs),
    /// Keep an idle-alerted job running (calls off its idle reclaim).
    ///
    /// Example: bursar keepalive j42
    Keepalive(bursar::people::KeepaliveArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    ///
    /// Example: bursar completions bash > /etc/bash_completion.d/bursar
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (bursar.1 and one per subcommand), made from the same text as --help.
    ///
    /// Example: bursar man --out /usr/share/man/man1
    Man {
        /// The folder to write them to (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Where the GPU-hours went: nominal vs effective by project, user or tag, billing-mode comparison.
    ///
    /// Example: bursar report --db audit.db --period 2026-11 --by project --format html -o report.html
    Report(bursar::report::ReportArgs),
}

fn run(cli: Cli) -> Result<ExitCode, CliError> {
    match cli.command {
        Command::Check { dir, cluster } => bursar::check::run(&dir, cluster, cli.error_format),
        Command::Test(args) => bursar::test::run(&args, cli.error_format),
        Command::Replay(args) => bursar::replay::run(&args, cli.error_format),
        Command::Fmt(args) => bursar::tomlfmt::run(&args),
        Command::Serve(args) => bursar::serve::run(&args, cli.error_format),
        Command::Slurm(args) => bursar::slurm::run(&args),
        Command::Kube(args) => bursar::kube::run(&args),
        Command::Audit(args) => bursar::audit::run(&args, cli.error_format),
        Command::Auth(args) => bursar::auth::run(&args),
        Command::Config(args) => bursar::config::run(&args, cli.error_format),
        Command::Doctor(args) => bursar::doctor::run(&args, cli.error_format),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "bursar", &mut std::io::stdout().lock());
            Ok(ExitCode::Ok)
        }
        Command::Man { out } => write_man_pages(&out),
        Command::Report(args) => bursar::report::run(&args, cli.error_format),
        Command::Pending(args) => bursar::people::pending(&args),
        Command::Estimate(args) => bursar::people::estimate(&args),
        Command::Approve(args) => bursar::people::approve(&args),
        Command::Reject(args) => bursar::people::reject(&args),
        Command::Keepalive(args) => bursar::people::keepalive(&args),
        Command::Eval {
            policies,
            events,
            dedupe_window,
            summary_json,
            audit,
            durability,
            max_line,
            allow_empty,
            signing_key,
            witness,
            adopt_unsigned,
            clock,
        } => {
            let set = match bursar::load_policies_with(&policies, cli.error_format, allow_empty) {
                Ok(s) => s,
                Err(CliError::Policies { .. }) => return Ok(ExitCode::Failed),
                Err(e) => return Err(e),
            };
            let input = bursar::eval::open_events(&events)?;
            let opts = bursar::eval::EvalOptions {
                source_name: bursar::eval::source_name(&events),
                engine: bursar_engine::EngineConfig { dedupe_window, ..Default::default() },
                error_format: cli.error_format,
                max_line: max_line.unwrap_or(bursar_session::DEFAULT_MAX_LINE),
                clock: clock.bound(),
            };
            let summary = match &audit {
                Some(db) => {
                    let witness =
                        bursar::audit::WitnessOpts::from_flags(signing_key.as_ref(), witness.as_ref(), adopt_unsigned);
                    let summary = bursar::audit::run_eval(set.clone(), input, &opts, db, durability, witness.as_ref())?;
                    // Bring the report facts (crates/report) up to date with what was just logged,
                    // with the budgets and idle threshold of the set that ran.
                    bursar::report::update_facts(db, Some(&set))?;
                    summary
                }
                None => {
                    let stdout = std::io::stdout().lock();
                    bursar::eval::run(set, input, bursar::sink::JsonLines::new(stdout), &opts)?.0
                }
            };
            if summary_json {
                eprintln!("{}", serde_json::to_string(&summary).unwrap_or_default());
            } else {
                eprintln!("{summary}");
            }
            Ok(ExitCode::Ok)
        }
        Command::Import { format, file, util, seed, sample_every, assume_ready, model_throughput, mapping } => {
            let opts = bursar::import::ImportOptions {
                format,
                file,
                util,
                seed,
                sample_every_secs: (sample_every.millis() / 1000).max(1),
                assume_ready,
                model_throughput,
                mapping,
            };
            let report = bursar::import::run(&opts, &mut std::io::stdout().lock())?;
            eprint!("{report}");
            Ok(ExitCode::Ok)
        }
        Command::Gen { jobs, projects, seed, sample_every } => {
            let cfg = bursar_traces::workload::GenConfig {
                jobs,
                projects,
                seed,
                sample_every_secs: (sample_every.millis() / 1000).max(1),
                ..Default::default()
            };
            let n = bursar::generate::run(cfg, &mut std::io::stdout().lock())?;
            eprintln!("gen: {n} events for {jobs} jobs over {projects} projects, seed {seed}");
            Ok(ExitCode::Ok)
        }
    }
}

/// Writes `bursar.1` and `bursar-<sub>.1` (and `bursar-<sub>-<subsub>.1`) into `out`.
fn write_man_pages(out: &std::path::Path) -> Result<ExitCode, CliError> {
    fn write(cmd: &clap::Command, name: &str, out: &std::path::Path, n: &mut usize) -> Result<(), CliError> {
        let cmd = cmd.clone().name(name.to_owned());
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd.clone())
            .render(&mut page)
            .map_err(|e| CliError::io(format!("cannot render the man page of `{name}`"), e))?;
        let path = out.join(format!("{name}.1"));
        std::fs::write(&path, page).map_err(|e| CliError::io(format!("cannot write `{}`", path.display()), e))?;
        *n += 1;
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            write(sub, &format!("{name}-{}", sub.get_name()), out, n)?;
        }
        Ok(())
    }
    std::fs::create_dir_all(out).map_err(|e| CliError::io(format!("cannot create `{}`", out.display()), e))?;
    let mut cmd = <Cli as clap::CommandFactory>::command();
    cmd.build();
    let mut n = 0;
    write(&cmd, "bursar", out, &mut n)?;
    eprintln!("bursar man: {n} page(s) in {}", out.display());
    Ok(ExitCode::Ok)
}

fn main() -> ProcessExit {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ProcessExit::from(code as u8),
        Err(e) if e.is_broken_pipe() => ProcessExit::from(ExitCode::Ok as u8),
        Err(e) => {
            eprintln!("bursar: error: {e}");
            ProcessExit::from(ExitCode::Error as u8)
        }
    }
}
