//! `bursar auth token`: a new random bearer token, and the line of `bursar.toml` that lets it in.
//!
//! The token goes to the client (a file only it can read, `--out`); the configuration keeps only
//! its SHA-256, so the configuration file, its backups and `bursar config show` reveal nothing that
//! authenticates (docs/security.md, "Rotating credentials").

use std::io::Write;
use std::path::PathBuf;

use crate::{CliError, ExitCode};

/// `bursar auth …`.
#[derive(Debug, Clone, clap::Args)]
pub struct AuthArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: AuthCommand,
}

/// The `auth` subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum AuthCommand {
    /// Make a new random token; print its hash for the configuration.
    ///
    /// A principal that sends inputs about jobs (the scheduler, producer and billing roles) is given
    /// the job ids it may speak for: --jobs PATTERN (repeat; `*` is a wildcard), or --all-jobs to
    /// let it speak for every job. The printed table says which, so pasting it never grants more than
    /// was asked for.
    ///
    /// Example: bursar auth token --name slurmctld --role scheduler --jobs 'slurm-*' --out /etc/slurm/bursar.token
    Token {
        /// The principal the token is for (for the printed `[[principal]]` table).
        #[arg(long, default_value = "NAME")]
        name: String,
        /// Its role(s), for the printed table (repeat for several).
        #[arg(long = "role", value_name = "ROLE")]
        roles: Vec<String>,
        /// The job ids it may speak for (repeat; `slurm-*`), for the printed table's `jobs`.
        #[arg(long = "jobs", value_name = "PATTERN", conflicts_with = "all_jobs")]
        jobs: Vec<String>,
        /// Let it speak for every job (the table gets no `jobs` line, and says so).
        #[arg(long)]
        all_jobs: bool,
        /// Write the token to this file (created with mode 0600; never overwritten) instead of
        /// printing it.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Print the hash of a token read from stdin (a token made elsewhere).
    Hash,
}

/// Runs `bursar auth`.
pub fn run(args: &AuthArgs) -> Result<ExitCode, CliError> {
    match &args.command {
        AuthCommand::Token { name, roles, jobs, all_jobs, out } => {
            use bursar_auth::Role;
            let mut speaks_for_jobs = false;
            for r in roles {
                match Role::parse(r) {
                    None => {
                        return Err(CliError::Message(format!(
                            "`{r}` is not a role\n  help: the roles are {}",
                            Role::NAMES.join(", ")
                        )));
                    }
                    Some(Role::Scheduler | Role::Producer | Role::Billing) => speaks_for_jobs = true,
                    Some(_) => {}
                }
            }
            // Without a `jobs` line a principal speaks for every job: never print one by omission.
            if speaks_for_jobs && jobs.is_empty() && !all_jobs {
                return Err(CliError::Message(format!(
                    "say which jobs `{name}` may speak for: its roles send inputs about jobs\n  help: add `--jobs 'slurm-*'` (the job ids it sends; repeat for several), or `--all-jobs` to let it speak for every job"
                )));
            }
            let token = bursar_auth::token::generate()
                .map_err(|e| CliError::Message(format!("cannot draw random bytes: {e}")))?;
            let hash = bursar_auth::TokenHash::of(&token).to_text();
            match out {
                Some(path) => {
                    use std::os::unix::fs::OpenOptionsExt;
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(path)
                        .map_err(|e| CliError::io(format!("cannot create `{}`", path.display()), e))?;
                    writeln!(f, "{token}")
                        .map_err(|e| CliError::io(format!("cannot write `{}`", path.display()), e))?;
                    eprintln!("bursar auth: token written to {} (mode 0600)", path.display());
                }
                None => println!("token = {token}    # for the client only: bursar keeps no copy"),
            }
            let roles = if roles.is_empty() {
                "\"ROLE\"".to_owned()
            } else {
                roles.iter().map(|r| format!("\"{r}\"")).collect::<Vec<_>>().join(", ")
            };
            let jobs_line = if !jobs.is_empty() {
                format!("jobs = [{}]\n", jobs.iter().map(|j| format!("{j:?}")).collect::<Vec<_>>().join(", "))
            } else if *all_jobs {
                "# no `jobs` line: it may speak for every job (--all-jobs)\n".to_owned()
            } else {
                String::new()
            };
            println!(
                "\n# in bursar.toml:\n[[principal]]\nname = \"{name}\"\nroles = [{roles}]\n{jobs_line}tokens = [\"{hash}\"]"
            );
            Ok(ExitCode::Ok)
        }
        AuthCommand::Hash => {
            let mut token = String::new();
            std::io::stdin().read_line(&mut token).map_err(|e| CliError::io("cannot read the token from stdin", e))?;
            if token.trim().is_empty() {
                return Err(CliError::Message("no token on stdin".into()));
            }
            println!("{}", bursar_auth::TokenHash::of(&token).to_text());
            Ok(ExitCode::Ok)
        }
    }
}
