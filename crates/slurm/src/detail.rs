//! What the poll's rows do not carry, read only when needed: a job's AdminComment (bursar's id and
//! markers, written by `job_submit.lua`) the first time the watcher sees it, and the GPUs Slurm
//! allocated to a run when it starts.
//!
//! Two sources give the same [`Details`]:
//!
//! - `scontrol show job -d -o ID` ([`parse_scontrol`]): one job (or one array's or heterogeneous
//!   job's records), a few kilobytes, milliseconds. Its text is `Key=value` pairs on one line, and
//!   some values are user text (the job's name, its comment, its paths) that may hold anything,
//!   `AdminComment=bursar_job=…` or a newline included. So a reading is only trusted when it cannot
//!   have been forged: one line per record Slurm lists, one `AdminComment=` key, no known key inside
//!   the admin comment's value, and every `bursar_` word of the line inside the admin comment or the
//!   comment; anything else is [`Ambiguous`] and read from the JSON instead.
//! - `squeue --json --states=all` ([`parse_json`]): every job with typed fields, unambiguous, but
//!   the whole queue (22.05 ignores its filters): 63 MB at 20,000 jobs. Used for ambiguous readings
//!   and when many jobs are new at once (a watcher starting beside a full queue).
//!
//! GPUs: `JOB_GRES=gpu:h100:8` is the job's total over its nodes (shown from allocation on, and
//! still after the end); without it, the per-node `GRES=gpu:h100:8(IDX:0-7)` are summed. A type
//! naming a MIG profile counts as its share ([`crate::gres_share`]): `JOB_GRES=gpu:1g.10gb:2` is 2/7.

use std::collections::BTreeMap;

use bursar_model::Gpus;
use serde::Deserialize;

use crate::{Error, Result};

/// The marker `job_submit.lua` writes into the AdminComment: `bursar_job=<id>`.
pub const JOB_MARKER: &str = "bursar_job=";
/// A job held for approval: `bursar_hold=1` (the enforcer clears it before it releases the job).
pub const HOLD_MARKER: &str = "bursar_hold=1";
/// Someone other than the enforcer released a held job: `bursar_released_by=<user>`.
pub const RELEASED_MARKER: &str = "bursar_released_by=";
/// A submission marked `--test-only` by `cli_filter.lua`: admitted with `test_only`, reserved
/// nothing, so a job that exists with it is a forged marker.
pub const TEST_ONLY_MARKER: &str = "bursar_test_only=1";
/// The hook let the job through without a decision (fail_open with bursar unreachable).
pub const UNADMITTED_MARKER: &str = "bursar_unadmitted=1";
/// In the job's Comment: the hook re-admitted the job after a partition change as `<new id>`.
pub const READMIT_MARKER: &str = "bursar_readmit=";

/// bursar's words about a job, from its AdminComment (and Comment for a re-admission).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Markers {
    /// `bursar_job=<id>`: the admission.
    pub job: Option<String>,
    /// `bursar_hold=1`: held for approval.
    pub hold: bool,
    /// `bursar_released_by=<user>`: released outside bursar while held for approval.
    pub released_by: Option<String>,
    /// `bursar_test_only=1`: admitted as a `--test-only` (nothing reserved).
    pub test_only: bool,
    /// `bursar_unadmitted=1`: let through without a decision.
    pub unadmitted: bool,
    /// `bursar_readmit=<id>` in the Comment: the current admission after a partition change.
    pub readmit: Option<String>,
}

fn word_value<'a>(text: &'a str, marker: &str) -> Option<&'a str> {
    text.split(|c: char| c.is_whitespace() || c == ';' || c == ',')
        .filter_map(|w| w.strip_prefix(marker))
        .find(|v| !v.is_empty())
}

fn has_word(text: &str, word: &str) -> bool {
    text.split(|c: char| c.is_whitespace() || c == ';' || c == ',').any(|w| w == word)
}

impl Markers {
    /// Reads the markers of an AdminComment and a Comment.
    pub fn read(admin_comment: &str, comment: &str) -> Markers {
        Markers {
            job: word_value(admin_comment, JOB_MARKER).map(str::to_owned),
            hold: has_word(admin_comment, HOLD_MARKER),
            released_by: word_value(admin_comment, RELEASED_MARKER).map(str::to_owned),
            test_only: has_word(admin_comment, TEST_ONLY_MARKER),
            unadmitted: has_word(admin_comment, UNADMITTED_MARKER),
            readmit: word_value(comment, READMIT_MARKER).map(str::to_owned),
        }
    }

    /// The job's current bursar id: the re-admission's, else the submission's.
    pub fn bursar_id(&self) -> Option<&str> {
        self.readmit.as_deref().or(self.job.as_deref())
    }
}

/// The AdminComment without the hold marker: what the enforcer writes back before it releases a job
/// bursar approved.
pub fn without_hold(admin_comment: &str) -> String {
    admin_comment.split_whitespace().filter(|w| *w != HOLD_MARKER).collect::<Vec<_>>().join(" ")
}

/// What one job's record says beyond the poll's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Details {
    /// Slurm's JobID of the record.
    pub job_id: u64,
    /// The AdminComment, as Slurm holds it.
    pub admin_comment: String,
    /// bursar's markers.
    pub markers: Markers,
    /// GPUs allocated, over all nodes (MIG slices as their share); `None` when the record shows none
    /// (not allocated yet).
    pub gpus: Option<Gpus>,
}

/// A reading that could have been forged by user text; the caller reads the JSON instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ambiguous(pub String);

/// GPUs in a GRES list: `gpu:h100:8`, `gpu:8`, `gpu:h100:2(IDX:0-1),nic:1`, `gpu:h100:3(IDX:0,2-3)`;
/// MIG slices as their share: `gpu:1g.10gb:2(IDX:0-1)` and `gpu:a100_1g.10gb:2` are 2/7.
/// `None` for `(null)`, an empty list or a list without GPUs.
pub fn gres_gpus(list: &str) -> Option<Gpus> {
    let mut total: Option<Gpus> = None;
    let mut depth = 0usize;
    let mut start = 0usize;
    let mut items = Vec::new();
    for (i, c) in list.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&list[start..]);
    for item in items {
        let item = item.split('(').next().unwrap_or("").trim();
        let Some(rest) = item.strip_prefix("gpu") else { continue };
        if !(rest.is_empty() || rest.starts_with(':')) {
            continue;
        }
        let rest = rest.strip_prefix(':').unwrap_or(rest);
        // `TYPE:N`, `N`, or a bare `TYPE` (one).
        let (ty, count) = match rest.rsplit_once(':') {
            Some((ty, n)) => (ty, n.parse::<u32>().unwrap_or(1)),
            None => match rest.parse::<u32>() {
                Ok(n) => ("", n),
                Err(_) => (rest, 1),
            },
        };
        total = Some(total.unwrap_or(Gpus::ZERO).saturating_add(crate::gres_gpus_of(ty, count)));
    }
    total
}

/// Keys of `scontrol show job` that come before `AdminComment` in a record: a reading whose admin
/// comment holds one of them took the comment from user text earlier in the line.
const KEYS_BEFORE: [&str; 12] = [
    " UserId=",
    " GroupId=",
    " JobState=",
    " Partition=",
    " NodeList=",
    " NumNodes=",
    " TRES=",
    " JOB_GRES=",
    " Features=",
    " Command=",
    " WorkDir=",
    " OverSubscribe=",
];
/// Keys that may end the AdminComment's value (the comment, then the paths).
const AFTER_ADMIN: [&str; 5] = [" Comment=", " StdErr=", " StdIn=", " StdOut=", " Power="];
/// Keys that may end the Comment's value.
const AFTER_COMMENT: [&str; 4] = [" StdErr=", " StdIn=", " StdOut=", " Power="];

fn first_of(text: &str, keys: &[&str]) -> Option<(usize, usize)> {
    keys.iter().filter_map(|k| text.find(k).map(|at| (at, k.len()))).min_by_key(|(at, _)| *at)
}

fn value_after<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(key)? + key.len();
    Some(line[at..].split(' ').next().unwrap_or(""))
}

fn read_line(line: &str) -> Result<Details, Ambiguous> {
    let amb = |why: &str| Ambiguous(why.to_owned());
    let id = line
        .strip_prefix("JobId=")
        .and_then(|r| r.split(' ').next())
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| amb("a record does not start with its JobId"))?;
    // Spaces in front of each key: the first key (JobId) has none, every later one has one.
    let spaced = format!(" {line}");
    let (admin, comment) = match spaced.matches(" AdminComment=").count() {
        0 => (String::new(), String::new()),
        1 => {
            let at = spaced.find(" AdminComment=").unwrap_or(0) + " AdminComment=".len();
            let rest = &spaced[at..];
            let (admin, after) = match first_of(rest, &AFTER_ADMIN) {
                Some((end, _)) => (&rest[..end], &rest[end..]),
                None => (rest, ""),
            };
            if KEYS_BEFORE.iter().any(|k| admin.contains(k)) {
                return Err(amb("the AdminComment holds other keys: it was read from user text"));
            }
            let comment = match after.strip_prefix(" Comment=") {
                Some(c) => match first_of(c, &AFTER_COMMENT) {
                    Some((end, _)) => &c[..end],
                    None => c,
                },
                None => "",
            };
            (admin.trim().to_owned(), comment.trim().to_owned())
        }
        _ => return Err(amb("more than one AdminComment= in the record")),
    };
    let words = spaced.matches("bursar_").count();
    if words != admin.matches("bursar_").count() + comment.matches("bursar_").count() {
        return Err(amb("a bursar_ word outside the AdminComment and the Comment"));
    }
    let gpus = match spaced.matches(" JOB_GRES=").count() {
        0 => {
            let mut total: Option<Gpus> = None;
            let mut rest = spaced.as_str();
            while let Some(at) = rest.find(" GRES=") {
                rest = &rest[at + " GRES=".len()..];
                if let Some(n) = gres_gpus(rest.split(' ').next().unwrap_or("")) {
                    total = Some(total.unwrap_or(Gpus::ZERO).saturating_add(n));
                }
            }
            total
        }
        1 => value_after(&spaced, " JOB_GRES=").and_then(gres_gpus),
        _ => return Err(amb("more than one JOB_GRES= in the record")),
    };
    let markers = Markers::read(&admin, &comment);
    Ok(Details { job_id: id, admin_comment: admin, markers, gpus })
}

/// Reads the output of `scontrol show job -d -o ID` (run with `SLURM_TIME_FORMAT=%s`), which lists
/// `expected` records (1 for a job or a task; every record of an array when ID is the array's own
/// JobID, every component when it is a heterogeneous leader). Any doubt about the output as a whole
/// (a line that is no record, another number of records, a JobId twice) is an [`Ambiguous`] of the
/// whole reading; a record that could be forged is an [`Ambiguous`] of that record.
pub fn parse_scontrol(text: &str, expected: usize) -> Result<BTreeMap<u64, Result<Details, Ambiguous>>, Ambiguous> {
    let lines: Vec<&str> = text.split('\n').filter(|l| !l.trim().is_empty()).collect();
    if lines.iter().any(|l| !l.starts_with("JobId=")) {
        return Err(Ambiguous("a line that is no record (a newline in user text?)".into()));
    }
    if lines.len() != expected {
        return Err(Ambiguous(format!("{} records where {expected} were expected", lines.len())));
    }
    let mut out = BTreeMap::new();
    for line in lines {
        let read = read_line(line);
        let id = match &read {
            Ok(d) => d.job_id,
            Err(_) => {
                match line.strip_prefix("JobId=").and_then(|r| r.split(' ').next()).and_then(|s| s.parse().ok()) {
                    Some(id) => id,
                    None => return Err(Ambiguous("a record without a JobId".into())),
                }
            }
        };
        if out.insert(id, read).is_some() {
            return Err(Ambiguous(format!("JobId={id} twice")));
        }
    }
    Ok(out)
}

/// One job as `squeue --json` reports it (the fields the agents use).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct JsonJob {
    /// Slurm's JobID.
    pub job_id: u64,
    /// The array it belongs to (0: none).
    #[serde(default)]
    pub array_job_id: u64,
    /// Its task index, when it is one task.
    #[serde(default)]
    pub array_task_id: Option<u32>,
    /// The heterogeneous leader (0: none).
    #[serde(default)]
    pub het_job_id: u64,
    /// `PENDING`, `RUNNING`, …
    #[serde(default)]
    pub job_state: String,
    /// Written by administrators and `job_submit.lua`.
    #[serde(default)]
    pub admin_comment: String,
    /// Written by the owner (and, for a re-admission marker, by the hook).
    #[serde(default)]
    pub comment: String,
    /// Per node: `gpu:h100:8(IDX:0-7)`; empty until allocated and again after the end.
    #[serde(default)]
    pub gres_detail: Vec<String>,
}

impl JsonJob {
    /// The same [`Details`] as `scontrol` gives.
    pub fn details(&self) -> Details {
        let gpus = self
            .gres_detail
            .iter()
            .filter_map(|g| gres_gpus(g))
            .fold(None, |t: Option<Gpus>, n| Some(t.unwrap_or(Gpus::ZERO).saturating_add(n)));
        Details {
            job_id: self.job_id,
            admin_comment: self.admin_comment.clone(),
            markers: Markers::read(&self.admin_comment, &self.comment),
            gpus,
        }
    }
}

/// Parses the output of `squeue --json --states=all`.
pub fn parse_json(json: &str) -> Result<Vec<JsonJob>> {
    read_json(json.as_bytes())
}

/// Reads the output of `squeue --json --states=all` as it streams from `reader`: each job entry is
/// read straight into a [`JsonJob`] (its few fields; the rest of the entry is skipped as it goes),
/// so the watcher holds the jobs' few fields, not the document — about 63 MB of JSON and 390 MB of
/// parsed tree at 20,000 jobs before (issue 55).
pub fn read_json(reader: impl std::io::Read) -> Result<Vec<JsonJob>> {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
    struct Out {
        jobs: Vec<JsonJob>,
        error: Option<serde_json::Value>,
    }
    struct OutVisitor;
    impl<'de> Visitor<'de> for OutVisitor {
        type Value = Out;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("squeue's JSON document (an object with `jobs`)")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Out, A::Error> {
            let mut out = Out { jobs: Vec::new(), error: None };
            let mut jobs = false;
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "jobs" => {
                        out.jobs = map.next_value()?;
                        jobs = true;
                    }
                    "errors" => out.error = map.next_value::<Vec<serde_json::Value>>()?.into_iter().next(),
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            if !jobs && out.error.is_none() {
                return Err(serde::de::Error::missing_field("jobs"));
            }
            Ok(out)
        }
    }
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(64 * 1024, reader));
    let out = de.deserialize_map(OutVisitor).map_err(|e| Error::Squeue(e.to_string()))?;
    if let Some(e) = out.error {
        return Err(Error::Squeue(format!("squeue reported an error: {e}")));
    }
    Ok(out.jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPES: &str = include_str!("../tests/data/seq/shapes.txt");
    const NAMES: &str = include_str!("../tests/data/scontrol-names-22.05.txt");
    const NAMES_JSON: &str = include_str!("../tests/data/squeue-names-22.05.json");
    const ARRAY: &str = include_str!("../tests/data/seq/array.txt");
    const HET: &str = include_str!("../tests/data/seq/het.txt");
    const RELEASE: &str = include_str!("../tests/data/seq/release.txt");

    /// The output of `### scontrol ID` number `nth` (0-based) in a capture file.
    fn scontrol_of(capture: &str, id: u64, nth: usize) -> String {
        let head = format!("### scontrol {id}\n");
        let mut parts = capture.split(&head).skip(1 + nth);
        let part = parts.next().unwrap_or_else(|| panic!("no scontrol {id} #{nth}"));
        part.split("\n###").next().unwrap_or("").to_owned()
    }

    /// `n` whole GPUs, as a record's reading.
    fn w(n: u32) -> Option<Gpus> {
        Some(Gpus::whole(n))
    }

    /// `n/d` of a GPU.
    fn f(n: u64, d: u64) -> Option<Gpus> {
        Gpus::fraction(n, d)
    }

    fn one(capture: &str, id: u64, nth: usize) -> Details {
        let map = parse_scontrol(&scontrol_of(capture, id, nth), 1).unwrap();
        map.get(&id).cloned().unwrap().unwrap()
    }

    #[test]
    fn gpus_of_every_shape_from_real_records() {
        // Last reading (all completed): JOB_GRES stays after the end.
        let exclusive = one(SHAPES, 42, 2);
        assert_eq!(exclusive.gpus, w(8), "--exclusive: the whole node's 8");
        assert_eq!(one(SHAPES, 43, 2).gpus, w(4), "-N 2 --gres=gpu:2: 2 per node");
        assert_eq!(one(SHAPES, 44, 2).gpus, w(1), "--gpus-per-socket=1");
        assert_eq!(one(SHAPES, 45, 2).gpus, w(3));
        // Running: JOB_GRES and the per-node GRES.
        assert_eq!(one(SHAPES, 42, 0).gpus, w(8));
        // Pending: nothing allocated.
        assert_eq!(one(SHAPES, 43, 0).gpus, None);
        assert_eq!(exclusive.markers.job.as_deref().map(|s| s.starts_with("lab-")), Some(true));
    }

    #[test]
    fn gres_lists() {
        assert_eq!(gres_gpus("gpu:h100:8"), w(8));
        assert_eq!(gres_gpus("gpu:8"), w(8));
        assert_eq!(gres_gpus("gpu:h100:2(IDX:0-1),nic:1"), w(2));
        assert_eq!(gres_gpus("gpu:h100:3(IDX:0,2-3)"), w(3));
        assert_eq!(gres_gpus("gpu:h100:4,gpu:a100:2"), w(6));
        assert_eq!(gres_gpus("(null)"), None);
        assert_eq!(gres_gpus(""), None);
        assert_eq!(gres_gpus("nic:1"), None);
        assert_eq!(gres_gpus("gpu:h100"), w(1), "a type without a count is one");
        assert_eq!(gres_gpus("gpus:2"), None, "not the gpu GRES");
    }

    /// MIG slices count as their share of a GPU (issue 55): `JOB_GRES=gpu:1g.10gb:2(IDX:0-1)` is 2/7,
    /// not 2 GPUs; AutoDetect's `a100_` prefix and the A30's quarters too; whole and sliced GPUs add.
    #[test]
    fn mig_slices_are_their_share() {
        assert_eq!(gres_gpus("gpu:1g.10gb:2(IDX:0-1)"), f(2, 7));
        assert_eq!(gres_gpus("gpu:1g.10gb:2"), f(2, 7));
        assert_eq!(gres_gpus("gpu:a100_1g.10gb:2(IDX:3-4)"), f(2, 7));
        assert_eq!(gres_gpus("gpu:3g.40gb:1(IDX:7),gpu:1g.10gb:4(IDX:0-3)"), w(1));
        assert_eq!(gres_gpus("gpu:1g.10gb:7"), w(1), "seven slices are one GPU, exactly");
        assert_eq!(gres_gpus("gpu:1g.6gb:2"), f(1, 2), "A30");
        assert_eq!(gres_gpus("gpu:h100:1,gpu:1g.10gb:2(IDX:0-1),nic:1"), f(9, 7));
        assert_eq!(gres_gpus("gpu:1g.10gb"), f(1, 7));
        assert_eq!(gres_gpus("gpu:9g.90gb:1"), w(1), "no GPU has nine slices: a whole GPU");
    }

    #[test]
    fn an_arrays_records_and_a_het_jobs_components() {
        // `scontrol show job 46` (the array's own id) lists every task record.
        let text = scontrol_of(ARRAY, 46, 0);
        let n = text.lines().count();
        assert!(n >= 3, "{text}");
        let all = parse_scontrol(&text, n).unwrap();
        assert!(all.values().all(|d| d.as_ref().unwrap().markers.job == all[&46].as_ref().unwrap().markers.job));
        assert!(matches!(parse_scontrol(&text, n + 1), Err(Ambiguous(_))), "another count is a doubt");
        // The leader lists both components, each with its own admission.
        let het = parse_scontrol(&scontrol_of(HET, 51, 0), 2).unwrap();
        let ids: Vec<_> = het.values().map(|d| d.as_ref().unwrap().markers.job.clone().unwrap()).collect();
        assert_eq!(ids[1], format!("{}+1", ids[0]));
    }

    #[test]
    fn held_then_released_by_an_administrator() {
        let held = one(RELEASE, 38, 0);
        assert!(held.markers.hold);
        assert_eq!(held.markers.released_by, None);
        let released = one(RELEASE, 38, 1);
        assert!(!released.markers.hold);
        assert_eq!(released.markers.released_by.as_deref(), Some("root"));
        assert_eq!(released.markers.job, held.markers.job);
        assert_eq!(without_hold("bursar_job=lab-1 bursar_hold=1"), "bursar_job=lab-1");
    }

    /// Regression: user text (a job's name, its comment) may hold `AdminComment=bursar_job=…`, a
    /// newline or `JOB_GRES=`; such records are read from the JSON instead, never taken at face value.
    #[test]
    fn forged_keys_in_user_text_are_never_taken() {
        // 56: a name with a newline and a fake record: two lines where one was asked for.
        assert!(parse_scontrol(&scontrol_of(NAMES, 56, 0), 1).is_err());
        // 57: `AdminComment=` and `JOB_GRES=` in the name, a real AdminComment after: two keys.
        let r57 = parse_scontrol(&scontrol_of(NAMES, 57, 0), 1).unwrap();
        assert!(r57[&57].is_err());
        // 58: no real AdminComment (submitted without the hook's mark), a forged one in the name: the
        // forged value runs into the record's own keys.
        let r58 = parse_scontrol(&scontrol_of(NAMES, 58, 0), 1).unwrap();
        assert!(r58[&58].is_err(), "{:?}", r58[&58]);
        // 59: a readmit word in the user's comment, cut short by a forged StdErr= inside it.
        let r59 = parse_scontrol(&scontrol_of(NAMES, 59, 0), 1).unwrap();
        let d59 = r59[&59].as_ref().unwrap();
        assert_eq!(d59.markers.readmit.as_deref(), Some("lab-forged"), "the comment's own words are read");
        // 60: no AdminComment at all: no bursar job.
        let r60 = parse_scontrol(&scontrol_of(NAMES, 60, 0), 1).unwrap();
        assert_eq!(r60[&60].as_ref().unwrap().markers, Markers::default());
        // The JSON of the same jobs: every field where it belongs.
        let json = parse_json(NAMES_JSON).unwrap();
        let by = |id: u64| json.iter().find(|j| j.job_id == id).unwrap().details();
        assert!(by(56).markers.job.as_deref().is_some_and(|j| j != "lab-victim"));
        assert_eq!(by(56).gpus, w(1));
        assert!(by(57).markers.job.as_deref().is_some_and(|j| j != "lab-victim"));
        assert_eq!(by(57).gpus, w(2));
        assert_eq!(by(58).markers.job, None);
        assert_eq!(by(60).markers, Markers::default());
    }

    #[test]
    fn markers() {
        let m = Markers::read("site note; bursar_job=lab-1 bursar_hold=1", "stage=x bursar_readmit=lab-2");
        assert_eq!((m.job.as_deref(), m.hold, m.readmit.as_deref()), (Some("lab-1"), true, Some("lab-2")));
        assert_eq!(m.bursar_id(), Some("lab-2"));
        assert_eq!(Markers::read("bursar_job=", "").job, None);
        assert!(Markers::read("bursar_test_only=1", "").test_only);
        assert!(Markers::read("bursar_unadmitted=1", "").unadmitted);
    }

    /// The one-node lab's `squeue --json` (22.05.8): completed, held-then-cancelled, deferred, failed
    /// and cancelled jobs, read by field.
    #[test]
    fn reads_real_squeue_json() {
        let jobs = parse_json(include_str!("../tests/data/squeue-22.05.json")).unwrap();
        assert_eq!(jobs.len(), 8);
        let held = jobs.iter().find(|j| j.job_id == 4).unwrap().details();
        assert_eq!(held.markers.job.as_deref(), Some("lab-9379758c56c8"));
        assert!(held.markers.hold);
        assert_eq!(jobs[0].details().markers.job.as_deref(), Some("lab-39f0662c183f"));
    }

    #[test]
    fn rejects_what_is_not_squeue_json() {
        assert!(matches!(parse_json("squeue: error: Invalid user"), Err(Error::Squeue(_))));
        assert!(matches!(parse_json(r#"{"jobs":[{"job_id":"x"}]}"#), Err(Error::Squeue(_))));
        let err = parse_json(r#"{"jobs":[],"errors":[{"error":"Unable to contact slurm controller"}]}"#);
        assert!(err.unwrap_err().to_string().contains("Unable to contact"));
        assert_eq!(parse_json(r#"{"jobs":[]}"#).unwrap(), vec![]);
    }
}
