//! What the pool has, read from Slurm's nodes: `scontrol -d show node -o` (one line a node; `-d`
//! adds `GresUsed`), turned into `pool.inventory` rows, one per GPU type and partition.
//!
//! From each node the watcher reads `NodeName`, `Gres` (`gpu:h100:8`, several types comma-separated,
//! `gpu:8` untyped, a socket binding in parentheses), `GresUsed` (`gpu:h100:3(IDX:0-2)`), `State`
//! (`IDLE`, `MIXED`, `ALLOCATED`, with `+DRAIN`, `DRAINING`, `DOWN`, `FAIL`, a trailing `*` for a
//! node not responding) and `Partitions`. Per (GPU type, partition):
//!
//! - a node drained, draining, down, failing or not responding counts all its GPUs as **drained**
//!   (none in service: no new job starts there);
//! - otherwise its GPUs are **in service**, `GresUsed` of them **allocated**, the rest **free**.
//!
//! A node in several partitions counts in each (Slurm's partitions share nodes: the same GPUs are
//! what each of them could start a job on). A GRES type names the GPU type as the submit hook does:
//! upper-cased (`h100` → `H100`) unless the watcher's `--gpu-type h100=H100-SXM` says otherwise; an
//! untyped `gpu:8` is `GPU`. Only `gpu` GRES count.
//!
//! **MIG slices.** A GRES type naming a MIG profile (`gpu:1g.10gb:7`, AutoDetect's
//! `gpu:a100_1g.10gb:7`) is a type of its own (`1G.10GB`, the name the submit hook gives a job asking
//! for it), and its GPUs are the slices' share ([`crate::gres_share`]): seven `1g.10gb` are one GPU,
//! two `3g.40gb` are 6/7 of one. A `pool.inventory` row counts them exactly (wire format v1.x: a
//! share is `"5/7"`): seven `1g.10gb` with two taken are 1 in service, 2/7 allocated, 5/7 free, so
//! the queue's estimates place a slice where one is free.
//!
//! The read costs one `scontrol` call whatever the queue (on the lab, well under 50 ms for two
//! nodes); the watcher makes it every few polls and sends an inventory only when the rows changed
//! ([`crate::watch`]).

use std::collections::BTreeMap;

use bursar_model::{CapacityRow, Gpus};

/// One node as `scontrol -d show node -o` prints it (the fields the inventory needs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Node {
    /// `NodeName`.
    pub name: String,
    /// GPUs per GRES type (`""`: untyped), from `Gres`: Slurm's counts (a MIG slice is one).
    pub gpus: BTreeMap<String, u32>,
    /// GPUs in use per GRES type, from `GresUsed` (Slurm's counts).
    pub used: BTreeMap<String, u32>,
    /// `State`, as printed (`IDLE+DRAIN`).
    pub state: String,
    /// `Partitions`.
    pub partitions: Vec<String>,
}

impl Node {
    /// All its GPUs, every type, MIG slices as their share ([`crate::gres_share`]): `gpu:h100:8` is 8,
    /// `gpu:1g.10gb:7,gpu:3g.40gb:2` is 13/7.
    pub fn total_gpus(&self) -> Gpus {
        self.gpus.iter().map(|(ty, &n)| crate::gres_gpus_of(ty, n)).sum()
    }

    /// Whether one of its GRES types is a MIG slice.
    pub fn has_mig(&self) -> bool {
        self.gpus.keys().any(|ty| bursar_model::mig_share(ty).is_some())
    }

    /// Whether no new job starts here: drained or draining, down, failing, not responding, or in
    /// maintenance or reboot.
    pub fn unavailable(&self) -> bool {
        let s = self.state.to_ascii_uppercase();
        s.ends_with('*')
            || ["DRAIN", "DOWN", "FAIL", "NOT_RESPONDING", "MAINT", "REBOOT", "POWERED_DOWN", "POWERING_DOWN", "FUTURE"]
                .iter()
                .any(|w| s.contains(w))
    }
}

/// The `Key=Value` fields of one line, where a value may hold spaces (`OS=Linux 6.1 #1 SMP`,
/// `Reason=gpu fault [root@…]`): a word that is not `Key=` continues the value before it.
fn fields(line: &str) -> BTreeMap<&str, String> {
    let mut out: BTreeMap<&str, String> = BTreeMap::new();
    let mut last: Option<&str> = None;
    for word in line.split_whitespace() {
        match word.split_once('=') {
            Some((k, v)) if !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                out.insert(k, v.to_owned());
                last = Some(k);
            }
            _ => {
                if let Some(v) = last.and_then(|k| out.get_mut(k)) {
                    v.push(' ');
                    v.push_str(word);
                }
            }
        }
    }
    out
}

/// The GPUs per type of a `Gres` or `GresUsed` value: `gpu:h100:8`, `gpu:a100:2(S:0),gpu:h100:4`,
/// `gpu:8`, `gpu:h100:3(IDX:0,2-3)` (commas inside parentheses are not separators). Other GRES
/// (`shard`, `mps`) and `(null)`, `N/A` give nothing.
pub fn gres(value: &str) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    let mut depth = 0u32;
    let mut item = String::new();
    let mut items = Vec::new();
    for c in value.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut item));
                continue;
            }
            _ => {}
        }
        if depth == 0 && c != ')' {
            item.push(c);
        }
    }
    items.push(item);
    for it in items {
        let parts: Vec<&str> = it.trim().split(':').collect();
        let (ty, count) = match parts.as_slice() {
            ["gpu", n] => ("", *n),
            ["gpu", t, n] => (*t, *n),
            _ => continue,
        };
        if let Ok(n) = count.parse::<u32>() {
            let e = out.entry(ty.to_owned()).or_insert(0u32);
            *e = e.saturating_add(n);
        }
    }
    out
}

/// The nodes of `scontrol -d show node -o`'s output; a line without `NodeName` is skipped.
pub fn parse_nodes(text: &str) -> Vec<Node> {
    text.lines()
        .filter_map(|line| {
            let f = fields(line);
            let name = f.get("NodeName")?.clone();
            Some(Node {
                name,
                gpus: f.get("Gres").map(|g| gres(g)).unwrap_or_default(),
                used: f.get("GresUsed").map(|g| gres(g)).unwrap_or_default(),
                state: f.get("State").cloned().unwrap_or_default(),
                partitions: f
                    .get("Partitions")
                    .map(|p| p.split(',').map(str::trim).filter(|p| !p.is_empty()).map(str::to_owned).collect())
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// The GPU type bursar names a GRES type by: `types`' mapping (`--gpu-type h100=H100-SXM`), else
/// the type upper-cased as the submit hook does; untyped GPUs are `GPU`.
pub fn gpu_type(gres_type: &str, types: &BTreeMap<String, String>) -> String {
    if let Some(t) = types.get(gres_type) {
        return t.clone();
    }
    if gres_type.is_empty() { "GPU".to_owned() } else { gres_type.to_ascii_uppercase() }
}

/// The inventory rows of `nodes` in `region`: one per (GPU type, partition), in that order. MIG
/// slices count as their share, exactly: seven `1g.10gb` with two taken are `5/7` free.
pub fn inventory(nodes: &[Node], region: &str, types: &BTreeMap<String, String>) -> Vec<CapacityRow> {
    // (type, partition) → (in service, allocated, drained), exact.
    let mut sums: BTreeMap<(String, String), (Gpus, Gpus, Gpus)> = BTreeMap::new();
    for n in nodes {
        let down = n.unavailable();
        for (ty, &count) in &n.gpus {
            let used = crate::gres_gpus_of(ty, n.used.get(ty).copied().unwrap_or(0).min(count));
            let count = crate::gres_gpus_of(ty, count);
            for p in &n.partitions {
                let e = sums.entry((gpu_type(ty, types), p.clone())).or_default();
                if down {
                    e.2 = e.2.saturating_add(count);
                } else {
                    e.0 = e.0.saturating_add(count);
                    e.1 = e.1.saturating_add(used);
                }
            }
        }
    }
    sums.into_iter()
        .map(|((gpu_type, queue), (in_service, allocated, drained))| CapacityRow {
            region: region.to_owned(),
            gpu_type,
            queue,
            in_service,
            allocated,
            free: in_service.saturating_sub(allocated),
            drained,
            backfill: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The real two-node lab (Slurm 22.05, 8 fake H100s a node, partitions debug, other, urgent):
    /// a 3-GPU job runs on n1, n2 is drained (`scontrol update NodeName=n2 State=DRAIN`).
    const LAB: &str = include_str!("../tests/data/scontrol-nodes-22.05.txt");

    #[test]
    fn the_lab_reads_as_one_row_per_partition_with_the_drained_node_apart() {
        let nodes = parse_nodes(LAB);
        assert_eq!(nodes.len(), 2);
        assert_eq!((nodes[0].name.as_str(), nodes[0].state.as_str()), ("n1", "MIXED"));
        assert_eq!(nodes[0].gpus.get("h100"), Some(&8));
        assert_eq!(nodes[0].used.get("h100"), Some(&3));
        assert_eq!(nodes[0].partitions, ["debug", "other", "urgent"]);
        assert!(nodes[1].unavailable(), "{:?}", nodes[1]);
        let rows = inventory(&nodes, "lab", &BTreeMap::new());
        // n1: 8 in service, 3 allocated, 5 free; n2: 8 drained; in each of the three partitions.
        assert_eq!(counts(&rows), ["H100 debug 8 3 5 8", "H100 other 8 3 5 8", "H100 urgent 8 3 5 8"]);
    }

    #[test]
    fn gres_lists_types_counts_and_bindings() {
        let g = gres("gpu:a100:2(S:0),gpu:h100:4(S:0-1),shard:8");
        assert_eq!(g.into_iter().collect::<Vec<_>>(), [("a100".to_owned(), 2), ("h100".to_owned(), 4)]);
        assert_eq!(gres("gpu:h100:3(IDX:0,2-3)").get("h100"), Some(&3), "a comma inside the index list");
        assert_eq!(gres("gpu:8").get(""), Some(&8));
        assert!(gres("(null)").is_empty() && gres("N/A").is_empty());
        let types = BTreeMap::from([("h100".to_owned(), "H100-SXM".to_owned())]);
        assert_eq!(
            (gpu_type("h100", &types), gpu_type("a100", &types), gpu_type("", &types)),
            ("H100-SXM".to_owned(), "A100".to_owned(), "GPU".to_owned())
        );
    }

    /// MIG slices (issue 55): the lab with SLURM_MIG=1 (`integrations/slurm/up.sh`): node m1 has one
    /// GPU cut into seven `1g.10gb` and one into two `3g.40gb` (the seventh slice of that layout
    /// unusable), two `1g.10gb` and one `3g.40gb` taken; n1 runs a 3-GPU job on its H100s.
    /// Each row as `type queue in_service allocated free drained`.
    fn counts(rows: &[CapacityRow]) -> Vec<String> {
        rows.iter()
            .map(|r| format!("{} {} {} {} {} {}", r.gpu_type, r.queue, r.in_service, r.allocated, r.free, r.drained))
            .collect()
    }

    #[test]
    fn mig_slices_are_rows_of_their_own_counted_exactly() {
        let nodes = parse_nodes(include_str!("../tests/data/scontrol-nodes-mig-22.05.txt"));
        let nodes = &nodes[..1];
        assert_eq!(nodes[0].name, "m1");
        assert_eq!(nodes[0].gpus.get("1g.10gb"), Some(&7), "Slurm's count: seven slices");
        assert_eq!(nodes[0].total_gpus(), Gpus::fraction(13, 7).unwrap(), "1 + 6/7");
        assert!(nodes[0].has_mig());
        assert!(!parse_nodes(LAB)[0].has_mig());
        let rows = inventory(nodes, "lab", &BTreeMap::new());
        // 1g.10gb: one GPU, two slices taken: five sevenths free. 3g.40gb: 6/7, one taken.
        assert_eq!(counts(&rows), ["1G.10GB mig 1 2/7 5/7 0", "3G.40GB mig 6/7 3/7 3/7 0"]);
        // Fourteen slices, one taken; a drained node's ten slices are 10/7 drained.
        let two = parse_nodes(
            "NodeName=m2 Gres=gpu:a100_1g.10gb:14 GresUsed=gpu:a100_1g.10gb:1(IDX:0) State=MIXED Partitions=mig\n\
             NodeName=m3 Gres=gpu:a100_1g.10gb:10 GresUsed=gpu:a100_1g.10gb:0 State=IDLE+DRAIN Partitions=mig\n",
        );
        let rows = inventory(&two, "lab", &BTreeMap::new());
        assert_eq!(counts(&rows), ["A100_1G.10GB mig 2 1/7 13/7 10/7"]);
    }

    #[test]
    fn down_failing_and_unresponsive_nodes_are_not_in_service() {
        for (state, out) in [
            ("IDLE", false),
            ("MIXED", false),
            ("ALLOCATED", false),
            ("IDLE+DRAIN", true),
            ("MIXED+DRAIN", true),
            ("DOWN*", true),
            ("IDLE*", true),
            ("DOWN+FAIL", true),
            ("IDLE+MAINT", true),
        ] {
            let n = Node { state: state.into(), ..Node::default() };
            assert_eq!(n.unavailable(), out, "{state}");
        }
    }
}
