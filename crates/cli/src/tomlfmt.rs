//! `bursar fmt [--check] [PATHS]`: normalise the layout of TOML policy files without touching their
//! comments (see `bursar_policytest::fmt` for the rules and the safety check). The module is called
//! `tomlfmt` because a `fmt` module would clash with `std::fmt` in the crate root.

use std::path::PathBuf;

use bursar_policytest::fmt::format_toml;

use crate::{CliError, ExitCode};

/// Arguments of `bursar fmt`.
#[derive(Debug, Clone, clap::Args)]
pub struct FmtArgs {
    /// Policy files or directories (every policy file under a directory; test files are left alone).
    #[arg(default_value = "policies")]
    pub paths: Vec<PathBuf>,
    /// Change nothing; list the files that would change and exit 1 if any would.
    #[arg(long)]
    pub check: bool,
}

/// Formats (or checks) the files.
pub fn run(args: &FmtArgs) -> Result<ExitCode, CliError> {
    let mut files = Vec::new();
    for p in &args.paths {
        if p.is_dir() {
            files.extend(bursar_loader::policy_files(p).map_err(|d| CliError::Message(d.message))?);
        } else {
            files.push(p.clone());
        }
    }
    let (mut changed, mut failed) = (0, 0);
    for f in &files {
        let text = std::fs::read_to_string(f).map_err(|e| CliError::io(format!("cannot read `{}`", f.display()), e))?;
        let formatted = match format_toml(&text) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("{}: {e}", f.display());
                failed += 1;
                continue;
            }
        };
        if formatted == text {
            continue;
        }
        changed += 1;
        if args.check {
            println!("{}", f.display());
        } else {
            std::fs::write(f, formatted).map_err(|e| CliError::io(format!("cannot write `{}`", f.display()), e))?;
            eprintln!("formatted {}", f.display());
        }
    }
    if args.check && changed > 0 {
        eprintln!("{changed} file(s) would be reformatted; run `bursar fmt` to fix");
    }
    Ok(if failed > 0 || (args.check && changed > 0) { ExitCode::Failed } else { ExitCode::Ok })
}
