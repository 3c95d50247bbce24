//! `bursar check DIR`: load and validate every policy file, report every error, exit 1 if any. With
//! `--cluster`, also name the quotas that `bursar serve --cluster` checks through its ledger partition
//! (scoped by user or tag: their ledgers span partitions), each a round trip more per admission.

use std::path::Path;

use crate::{CliError, ErrorFormat, ExitCode, load_policies};

/// Runs the check; prints a one-line summary to stderr on success.
pub fn run(dir: &Path, cluster: bool, format: ErrorFormat) -> Result<ExitCode, CliError> {
    match load_policies(dir, format) {
        Ok(set) => {
            if cluster {
                for s in bursar_cluster::spanning_quotas(&set) {
                    eprintln!("note: {s}");
                }
            }
            // Issue 56: which holds any approver may answer is a question of the configuration, so
            // the policy author is told where it is answered.
            for p in set.policies().iter().filter(|p| p.unnamed_approval()) {
                eprintln!(
                    "note: `{}` ({}) names no `approvers`: its holds are answered by any approver or admin the configuration names (a `[[principal]]` or `[[person]]` with the role), not by every person `[auth] people` makes an approver; name them in `approvers` to narrow it",
                    p.meta().id,
                    p.meta().source
                );
            }
            // Policy files; the components WebAssembly policies run are listed among the set's files too.
            let files = set.files().iter().filter(|f| !set.guests().iter().any(|g| g.path == f.path)).count();
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
