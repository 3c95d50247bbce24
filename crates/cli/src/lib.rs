//! The `bursar` command line: one module per subcommand, each a thin layer over the libraries.
//!
//! `main.rs` parses arguments and maps results to exit codes ([`ExitCode`]); the modules here do the
//! work and return typed errors. Nothing in this crate decides policy: it loads, feeds and reports.
//!
//! Layout: [`check`] validates a policy directory; [`eval`] runs policies over an event stream;
//! [`sink`] is where decisions go (stdout, and later the audit log).

pub mod audit;
pub mod auth;
pub mod check;
pub mod config;
pub mod connect;
pub mod doctor;
pub mod eval;
pub mod generate;
pub mod import;
pub mod kube;
pub mod people;
pub mod replay;
pub mod report;
pub mod serve;
pub mod sink;
pub mod slurm;
pub mod test;
pub mod tomlfmt;
pub mod values;

use std::fmt;

/// What this binary is: its version, the commit it was built from, what it was built with.
pub mod build {
    /// The package version.
    pub const VERSION: &str = env!("CARGO_PKG_VERSION");
    /// The commit (`-dirty` when built from a tree with changes; `unknown` outside git).
    pub const COMMIT: &str = env!("BURSAR_COMMIT");
    /// What this build can do, comma-separated, as `/metrics` names it.
    pub const FEATURES: &str = env!("BURSAR_FEATURES");
    /// `bursar --version`'s line: `0.1.0 (commit 1a2b3c4d5e6f; wasm, cluster, jwt, munge, sqlite)`.
    pub const LINE: &str = env!("BURSAR_VERSION_LINE");

    /// What `serve` reports on `/metrics` as `bursar_build_info`.
    pub fn info() -> bursar_serve::BuildInfo {
        bursar_serve::BuildInfo { version: VERSION, commit: COMMIT, features: FEATURES.to_owned() }
    }
}

/// How the process exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// Everything fine.
    Ok = 0,
    /// The command ran and found a problem (invalid policies, failed tests, a broken audit chain).
    Failed = 1,
    /// The command could not run (bad arguments, unreadable files).
    Error = 2,
}

/// Errors the commands report, with the context a user needs.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Reading or writing a file or stream failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// The policy directory has errors (already printed).
    #[error("{count} error(s) in the policies")]
    Policies {
        /// How many.
        count: usize,
    },
    /// Anything else, already phrased for the user.
    #[error("{0}")]
    Message(String),
}

impl CliError {
    /// An I/O error with what was being done.
    pub fn io(context: impl fmt::Display, source: std::io::Error) -> CliError {
        CliError::Io { context: context.to_string(), source }
    }

    /// True when the error is a closed stdout (`bursar eval … | head`), which is not worth reporting.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Io { source, .. } if source.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// How diagnostics are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ErrorFormat {
    /// For people: location, source line, underline, help.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

/// Loads a policy directory with the hosts this build supports, printing every error.
pub fn load_policies(
    dir: &std::path::Path,
    format: ErrorFormat,
) -> Result<std::sync::Arc<bursar_engine::PolicySet>, CliError> {
    load_policies_with(dir, format, false)
}

/// Like [`load_policies`]; with `allow_empty`, a directory without any policy is not an error.
pub fn load_policies_with(
    dir: &std::path::Path,
    format: ErrorFormat,
    allow_empty: bool,
) -> Result<std::sync::Arc<bursar_engine::PolicySet>, CliError> {
    // One process-wide WebAssembly host, so a reload reuses the components it already compiled.
    let host = bursar_wasm::WasmHost::shared().map_err(|e| CliError::Message(e.to_string()))?;
    let loaded = if allow_empty {
        bursar_loader::load_dir_allowing_empty(dir, host)
    } else {
        bursar_loader::load_dir(dir, host)
    };
    match loaded {
        Ok(set) => Ok(std::sync::Arc::new(set)),
        Err(diags) => {
            print_diagnostics(&diags, format);
            Err(CliError::Policies { count: diags.len() })
        }
    }
}

/// Prints diagnostics to stderr.
pub fn print_diagnostics(diags: &[bursar_lang::Diagnostic], format: ErrorFormat) {
    for d in diags {
        match format {
            ErrorFormat::Human => eprint!("{d}"),
            ErrorFormat::Json => eprintln!("{}", serde_json::to_string(d).unwrap_or_default()),
        }
    }
}
