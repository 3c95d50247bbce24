//! Table-driven cases kept as files: `tests/cases/<name>/` holds `policies/` (policy files),
//! `events.jsonl` and `expected.jsonl`; each case becomes one test that runs the real `bursar eval`
//! binary and requires byte-identical output, twice (a restart on the same input must not change a
//! byte). An optional `expected.stderr` lists lines that must appear on stderr (malformed-line
//! reports, the summary). Every `job.submitted` must get exactly one enforced admission decision.
//!
//! `BURSAR_BLESS=1 cargo test -p bursar --test cases` rewrites `expected.jsonl` from the current
//! output: review the diff before committing it. `cargo test -p bursar --test cases -- NAME` runs one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use libtest_mimic::{Arguments, Failed, Trial};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/cases")
}

fn eval(case: &Path) -> Result<(String, String), Failed> {
    let out = Command::new(env!("CARGO_BIN_EXE_bursar"))
        .arg("eval")
        .arg("--policies")
        .arg(case.join("policies"))
        .arg("--events")
        .arg(case.join("events.jsonl"))
        .output()
        .map_err(|e| format!("cannot run bursar: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(format!("bursar eval exited with {}:\n{stderr}", out.status).into());
    }
    Ok((stdout, stderr))
}

fn diff(expected: &str, actual: &str) -> String {
    let e: Vec<&str> = expected.lines().collect();
    let a: Vec<&str> = actual.lines().collect();
    let mut s = String::new();
    for i in 0..e.len().max(a.len()) {
        match (e.get(i), a.get(i)) {
            (Some(x), Some(y)) if x == y => {}
            (x, y) => s.push_str(&format!(
                "line {}:\n  expected: {}\n  actual:   {}\n",
                i + 1,
                x.unwrap_or(&"(none)"),
                y.unwrap_or(&"(none)")
            )),
        }
    }
    s
}

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).collect()
}

fn run_case(case: &Path) -> Result<(), Failed> {
    let (first, stderr) = eval(case)?;
    let (second, _) = eval(case)?;
    if first != second {
        return Err(format!("two runs on the same input differ:\n{}", diff(&first, &second)).into());
    }
    let expected_path = case.join("expected.jsonl");
    if std::env::var_os("BURSAR_BLESS").is_some() {
        std::fs::write(&expected_path, &first).map_err(|e| format!("cannot write {}: {e}", expected_path.display()))?;
    }
    let expected = std::fs::read_to_string(&expected_path)
        .map_err(|e| format!("cannot read {}: {e} (run with BURSAR_BLESS=1 to create it)", expected_path.display()))?;
    if first != expected {
        return Err(format!("decisions differ from expected.jsonl:\n{}", diff(&expected, &first)).into());
    }

    // Every distinct job.submitted event gets exactly one enforced admission decision, unless it
    // was refused (reported on stderr with its line: a second submission of a known job id, an
    // event dated beyond the clock bound), which changes nothing and decides nothing.
    let events = std::fs::read_to_string(case.join("events.jsonl")).map_err(|e| e.to_string())?;
    let refused: BTreeSet<usize> = stderr
        .lines()
        .filter_map(|l| l.split_once(": refused: ").map(|(at, _)| at))
        .filter_map(|at| at.rsplit(':').next()?.parse().ok())
        .collect();
    let mut seen = BTreeSet::new();
    let decisions = json_lines(&first);
    for (n, line) in events.lines().enumerate() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let id = v["id"].as_str().unwrap_or("").to_owned();
        if v["type"] != "job.submitted" || refused.contains(&(n + 1)) || !seen.insert(id.clone()) {
            continue;
        }
        let n = decisions
            .iter()
            .filter(|d| d["event_id"] == id.as_str() && d["admission"] == true && d.get("dry_run").is_none())
            .count();
        if n != 1 {
            return Err(format!("job.submitted event {id} got {n} admission decisions, expected exactly 1").into());
        }
    }

    if let Ok(want) = std::fs::read_to_string(case.join("expected.stderr")) {
        for line in want.lines().filter(|l| !l.trim().is_empty()) {
            if !stderr.contains(line) {
                return Err(format!("stderr lacks `{line}`; it was:\n{stderr}").into());
            }
        }
    }
    Ok(())
}

fn main() {
    let args = Arguments::from_args();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(root())
        .map(|rd| rd.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.is_dir()).collect())
        .unwrap_or_default();
    cases.sort();
    let trials = cases
        .into_iter()
        .map(|case| {
            let name = case.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            Trial::test(name, move || run_case(&case))
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
