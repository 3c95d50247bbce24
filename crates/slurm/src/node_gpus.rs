//! The GPUs of each partition's largest node, written by the watcher for the submit hook: what
//! `--exclusive` holds (issue 55).
//!
//! An `--exclusive` job is given whole nodes, and with them every GPU on them, whatever it asked for.
//! `job_submit.lua` runs before Slurm picks the nodes, and inside slurmctld it has no cheap way to read
//! them, so the watcher — which reads the nodes anyway for the inventory ([`crate::nodes`]) — writes
//! what the hook needs into a small file (`--node-gpus-file`, by default beside its state file):
//!
//! ```text
//! # bursar slurm watch: GPUs of the largest node of each partition (job_submit.lua, --exclusive)
//! debug<TAB>8
//! other<TAB>8
//! ```
//!
//! One line per partition, its name, a tab (shown `<TAB>`) and a count; `#` starts a comment. The hook reads it with a
//! pattern match (no Lua code is loaded from it), re-reading it every few seconds.
//!
//! **Which nodes count.** Every node of the partition, whatever its state: a drained, down or
//! not-responding node is still where an exclusive job may run once it is back, and a reservation
//! that shrank every time the biggest node went into maintenance would under-reserve the jobs
//! admitted meanwhile. A node's GPUs are all its `gpu` GRES, every type summed (an exclusive job holds
//! them all). A partition whose nodes have no GPUs is written with 0. The figure is an upper bound
//! for the admission: when the run starts, the watcher reports what Slurm really allocated and bursar
//! corrects the reservation.
//!
//! **MIG slices.** A MIG type counts as its slices' share ([`crate::gres_share`]), and the file holds
//! whole GPUs (the hook reads a whole number), so a node's sum is rounded *up*, keeping the figure an
//! upper bound: seven `1g.10gb` are 1; two `3g.40gb` (6/7: that layout leaves the seventh slice unused)
//! beside them are 13/7, written 2. The start's correction brings the reservation to the exact share.
//!
//! **Writing.** Only when the content changed (compared with the file on disk, so a deleted file is
//! written again at the next read of the nodes), through a temporary file in the same directory and a
//! rename: the hook never reads half a file. The file is made world-readable (`0644`): slurmctld runs
//! as `SlurmUser`, and what it holds is what `sinfo` shows every user.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::nodes::Node;

/// The file's first line.
const HEADER: &str = "# bursar slurm watch: GPUs of the largest node of each partition (job_submit.lua, --exclusive)";

/// What can go wrong writing the file.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot write the node GPUs file `{path}`: {source}\n  help: the watcher writes it for job_submit.lua's --exclusive; make its directory writable by the watcher, or point --node-gpus-file elsewhere (and the hook's node_gpus_file with it)"
)]
pub struct WriteError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// The GPUs of the largest node of each partition named in `nodes`' records (every node, in any
/// state; all its GPU types summed, MIG slices as their share and the sum rounded up to whole GPUs;
/// 0 for a partition without GPUs).
pub fn largest_per_partition(nodes: &[Node]) -> BTreeMap<String, u32> {
    let mut out: BTreeMap<String, u32> = BTreeMap::new();
    for n in nodes {
        let gpus = n.total_gpus().ceil();
        for p in &n.partitions {
            let e = out.entry(p.clone()).or_insert(0);
            *e = (*e).max(gpus);
        }
    }
    out
}

/// The file's text: the header, then `partition<TAB>gpus` lines in name order. A name holding
/// whitespace or starting with `#` (Slurm allows neither) is left out rather than written as a line
/// the hook would misread.
pub fn render(largest: &BTreeMap<String, u32>) -> String {
    let mut text = String::from(HEADER);
    text.push('\n');
    for (p, gpus) in largest {
        if p.is_empty() || p.starts_with('#') || p.chars().any(char::is_whitespace) {
            continue;
        }
        text.push_str(p);
        text.push('\t');
        text.push_str(&gpus.to_string());
        text.push('\n');
    }
    text
}

/// Writes `largest` to `path` if its text differs from the file's (atomically: a temporary file
/// beside it, then a rename). Returns whether it wrote.
pub fn write(path: &Path, largest: &BTreeMap<String, u32>) -> Result<bool, WriteError> {
    let text = render(largest);
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(false);
    }
    let fail = |source| WriteError { path: path.to_owned(), source };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let result = (|| -> std::io::Result<()> {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o644);
        }
        let mut f = options.open(&tmp)?;
        #[cfg(unix)]
        {
            // The mode given at creation is cut by the umask; the hook's reader is another user.
            use std::os::unix::fs::PermissionsExt;
            f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(true)
}

/// The default path: beside the watcher's state file, named after it
/// (`/var/lib/bursar/slurm-watch.json` → `/var/lib/bursar/slurm-watch.node-gpus.tsv`), which is
/// where the hook's `node_gpus_file` looks by default.
pub fn default_path(state: &Path) -> PathBuf {
    state.with_extension("node-gpus.tsv")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::parse_nodes;

    const LAB: &str = include_str!("../tests/data/scontrol-nodes-22.05.txt");

    fn node(name: &str, gres: &str, state: &str, partitions: &str) -> String {
        format!("NodeName={name} Gres={gres} GresUsed=gpu:0 State={state} Partitions={partitions}\n")
    }

    /// A node in two partitions counts in both; the largest node wins, a drained one included; GPU
    /// types are summed; a partition without GPUs is 0.
    #[test]
    fn the_largest_node_of_each_partition_drained_or_not() {
        let text = [
            node("a1", "gpu:a100:4", "IDLE", "a100,shared"),
            node("h1", "gpu:h100:8", "MIXED", "h100"),
            node("h2", "gpu:h100:6,gpu:l4:4(S:0)", "IDLE+DRAIN", "h100,shared"),
            node("c1", "(null)", "IDLE", "cpu,shared"),
            node("x1", "gpu:16", "DOWN*", "big"),
        ]
        .concat();
        let got = largest_per_partition(&parse_nodes(&text));
        let want: BTreeMap<String, u32> =
            [("a100", 4), ("big", 16), ("cpu", 0), ("h100", 10), ("shared", 10)].map(|(p, g)| (p.to_owned(), g)).into();
        assert_eq!(got, want);
    }

    /// MIG slices count as their share, a node's sum rounded up (issue 55): seven `1g.10gb` are one
    /// GPU, two `3g.40gb` more make 13/7, written 2; whole GPUs beside slices add.
    #[test]
    fn mig_nodes_are_their_slices_share_rounded_up() {
        let text = [
            node("m1", "gpu:1g.10gb:7", "IDLE", "mig7"),
            node("m2", "gpu:1g.10gb:7,gpu:3g.40gb:2", "MIXED", "mig"),
            node("m3", "gpu:a100_3g.40gb:2", "IDLE", "mig6"),
            node("x1", "gpu:h100:4,gpu:1g.10gb:3(S:0)", "IDLE", "mixed"),
        ]
        .concat();
        let got = largest_per_partition(&parse_nodes(&text));
        let want: BTreeMap<String, u32> =
            [("mig", 2), ("mig6", 1), ("mig7", 1), ("mixed", 5)].map(|(p, g)| (p.to_owned(), g)).into();
        assert_eq!(got, want);
    }

    /// The lab's capture: n2 is drained, and both nodes have 8 GPUs in all three partitions.
    #[test]
    fn the_lab_reads_as_eight_in_each_partition() {
        let text = render(&largest_per_partition(&parse_nodes(LAB)));
        assert_eq!(text, format!("{HEADER}\ndebug\t8\nother\t8\nurgent\t8\n"));
    }

    /// The lab with SLURM_MIG=1: m1's seven `1g.10gb` and two `3g.40gb` (13/7) are written 2 for
    /// partition `mig`; the H100 partitions are as before.
    #[test]
    fn the_mig_lab_reads_as_two_in_partition_mig() {
        let nodes = parse_nodes(include_str!("../tests/data/scontrol-nodes-mig-22.05.txt"));
        let text = render(&largest_per_partition(&nodes));
        assert_eq!(text, format!("{HEADER}\ndebug\t8\nmig\t2\nother\t8\nurgent\t8\n"));
    }

    #[test]
    fn names_the_hook_would_misread_are_left_out() {
        let m: BTreeMap<String, u32> =
            [("ok", 2), ("#x", 1), ("a b", 3), ("", 4)].map(|(p, g)| (p.to_owned(), g)).into();
        assert_eq!(render(&m), format!("{HEADER}\nok\t2\n"));
    }

    /// Written through a temporary file and a rename, world-readable, only when the text changed, and
    /// again after the file was deleted.
    #[test]
    fn the_file_is_replaced_atomically_and_only_when_it_changed() {
        let dir = bursar_testkit::TempDir::new("slurm-node-gpus").unwrap();
        let path = default_path(&dir.join("watch.json"));
        assert_eq!(path, dir.join("watch.node-gpus.tsv"));
        let one: BTreeMap<String, u32> = [("debug".to_owned(), 8)].into();
        assert!(write(&path, &one).unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{HEADER}\ndebug\t8\n"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::{MetadataExt, PermissionsExt};
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o644);
            // Unchanged: not written (the same inode, no temporary file left).
            let ino = std::fs::metadata(&path).unwrap().ino();
            assert!(!write(&path, &one).unwrap());
            assert_eq!(std::fs::metadata(&path).unwrap().ino(), ino);
            // Changed: a new file renamed over the old (a reader holding the old one reads it whole).
            let mut two = one.clone();
            two.insert("other".into(), 4);
            let reader = std::fs::File::open(&path).unwrap();
            assert!(write(&path, &two).unwrap());
            assert_ne!(std::fs::metadata(&path).unwrap().ino(), ino, "replaced by a rename");
            assert_eq!(std::io::read_to_string(reader).unwrap(), format!("{HEADER}\ndebug\t8\n"));
            assert_eq!(std::fs::read_to_string(&path).unwrap(), format!("{HEADER}\ndebug\t8\nother\t4\n"));
        }
        std::fs::remove_file(&path).unwrap();
        assert!(write(&path, &one).unwrap(), "a deleted file is written again");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, [std::ffi::OsString::from("watch.node-gpus.tsv")], "no temporary file left");
    }

    #[test]
    fn a_directory_that_does_not_exist_is_an_error_naming_the_file() {
        let dir = bursar_testkit::TempDir::new("slurm-node-gpus-missing").unwrap();
        let path = dir.join("no/such/dir/f.tsv");
        let e = write(&path, &BTreeMap::new()).unwrap_err();
        assert!(e.to_string().contains("f.tsv") && e.to_string().contains("--node-gpus-file"), "{e}");
    }
}
