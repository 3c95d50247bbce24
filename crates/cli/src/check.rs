//! `bursar check DIR`: load and validate every policy file, report every error, exit 1 if any. With
//! `--cluster`, also refuse quotas that `bursar serve --cluster` cannot enforce exactly (scoped by user
//! or tag: their ledgers span partitions), as `serve --cluster` refuses them at start.

use std::path::Path;

use crate::{CliError, ErrorFormat, ExitCode, load_policies};

/// Runs the check; prints a one-line summary to stderr on success.
pub fn run(dir: &Path, cluster: bool, format: ErrorFormat) -> Result<ExitCode, CliError> {
    match load_policies(dir, format) {
        Ok(set) if cluster && !bursar_cluster::spanning_quotas(&set).is_empty() => {
            let spanning = bursar_cluster::spanning_quotas(&set);
            for s in &spanning {
                eprintln!("error: {s}");
            }
            eprintln!("{}: {} policy(ies) cannot run in cluster mode", dir.display(), spanning.len());
            Ok(ExitCode::Failed)
        }
        Ok(set) => {
            let files = set.files().len();
            eprintln!(
                "{}: {} policies in {files} file(s), all valid (set {})",
                dir.display(),
                set.len(),
                &set.digest()[..12.min(set.digest().len())]
            );
            Ok(ExitCode::Ok)
        }
        Err(CliError::Policies { count }) => {
            eprintln!("{}: {count} error(s)", dir.display());
            Ok(ExitCode::Failed)
        }
        Err(e) => Err(e),
    }
}
