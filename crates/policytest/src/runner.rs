//! Running test cases: each case from a fresh engine over the policy set, its decisions checked against
//! the expectations, and a report that reads like a diff.
//!
//! Matching is a maximum bipartite matching between expectations and decisions (each expectation claims
//! a distinct decision), so a general expectation written first cannot steal the decision a more precise
//! one needs. What is reported for a failed case: expectations no decision satisfied (`-`), decisions
//! that a `[[case.absent]]` forbids (`!`), and, for strict cases, non-alert decisions no expectation
//! claimed (`+`); every decision of the case is listed so the reader sees what happened instead.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bursar_engine::{Coverage, Engine, PolicySet};
use bursar_model::{Decision, DecisionKind};
use bursar_session::{Memory, Origin, Session};
use serde::Serialize;

use crate::format::{Case, FormatError, TestFile, parse_test_file};

/// The `*.test.toml` files under `dir` (recursively, skipping hidden directories and `target/`), sorted.
/// A file given directly is returned alone.
pub fn find_test_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    if dir.is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    fn walk(d: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(d)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    walk(&path, out)?;
                }
            } else if name.ends_with(".test.toml") {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, &mut out)?;
    out.sort();
    Ok(out)
}

/// Reads and parses test files, keeping the errors of the ones that do not parse.
pub fn load_test_files(paths: &[PathBuf]) -> (Vec<TestFile>, Vec<FormatError>) {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for p in paths {
        match std::fs::read_to_string(p) {
            Ok(src) => match parse_test_file(p, &src) {
                Ok(f) => files.push(f),
                Err(mut e) => errors.append(&mut e),
            },
            Err(e) => errors.push(FormatError {
                file: p.display().to_string(),
                line: 1,
                column: 1,
                message: format!("cannot read test file: {e}"),
            }),
        }
    }
    (files, errors)
}

/// How one decision of a case fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mark {
    /// Claimed by an expectation.
    Matched,
    /// Not claimed, in a strict case, and not an alert: a failure.
    Unexpected,
    /// Matches an `absent` entry: a failure.
    Forbidden,
    /// Not claimed and not checked.
    Unchecked,
}

/// The outcome of one case.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// The test file.
    pub file: String,
    /// The case name.
    pub name: String,
    /// Line of the case in the file.
    pub line: usize,
    /// True when every check held.
    pub passed: bool,
    /// Expectations no decision satisfied: (line in the test file, description).
    pub missing: Vec<(usize, String)>,
    /// Forbidden decisions that appeared: (line of the `absent` entry, its description).
    pub forbidden: Vec<(usize, String)>,
    /// Every decision of the case, in order, with how it fared.
    pub decisions: Vec<(Mark, Decision)>,
}

/// Runs one case from a fresh engine. With `coverage`, the branches its verdicts took are added.
pub fn run_case(set: &Arc<PolicySet>, file: &str, case: &Case, coverage: Option<&mut Coverage>) -> CaseResult {
    let mut session = Session::new(Engine::new(set.clone()), Memory::default(), Origin::Producer);
    if coverage.is_some() {
        session.engine_mut().enable_coverage();
    }
    for e in &case.events {
        // A memory journal never refuses.
        let _ = session.apply(&e.input, &e.raw);
    }
    if let (Some(acc), Some(got)) = (coverage, session.engine().coverage()) {
        acc.extend(got.iter().cloned());
    }
    let (_, journal) = session.into_parts();
    check(file, case, journal.decisions)
}

/// Checks `decisions` against the case's expectations.
pub fn check(file: &str, case: &Case, decisions: Vec<Decision>) -> CaseResult {
    let claimed = match_expectations(case, &decisions);
    let mut marks: Vec<Mark> = vec![Mark::Unchecked; decisions.len()];
    let mut missing = Vec::new();
    for (x, slot) in case.expect.iter().zip(&claimed) {
        match slot {
            Some(d) => marks[*d] = Mark::Matched,
            None => missing.push((x.line, x.describe())),
        }
    }
    let mut forbidden = Vec::new();
    for a in &case.absent {
        let mut hit = false;
        for (i, d) in decisions.iter().enumerate() {
            if a.matches(d) {
                marks[i] = Mark::Forbidden;
                hit = true;
            }
        }
        if hit {
            forbidden.push((a.line, a.describe()));
        }
    }
    if case.strict {
        for (m, d) in marks.iter_mut().zip(&decisions) {
            if *m == Mark::Unchecked && d.decision != DecisionKind::Alert {
                *m = Mark::Unexpected;
            }
        }
    }
    let passed = missing.is_empty() && forbidden.is_empty() && !marks.contains(&Mark::Unexpected);
    CaseResult {
        file: file.to_owned(),
        name: case.name.clone(),
        line: case.line,
        passed,
        missing,
        forbidden,
        decisions: marks.into_iter().zip(decisions).collect(),
    }
}

/// For each expectation, the index of the decision it claims (Kuhn's augmenting paths; expectations in
/// file order, decisions in emission order, so the result is deterministic).
fn match_expectations(case: &Case, decisions: &[Decision]) -> Vec<Option<usize>> {
    let fits: Vec<Vec<usize>> = case
        .expect
        .iter()
        .map(|x| decisions.iter().enumerate().filter(|(_, d)| x.matches(d)).map(|(i, _)| i).collect())
        .collect();
    let mut owner: Vec<Option<usize>> = vec![None; decisions.len()];
    fn augment(x: usize, fits: &[Vec<usize>], owner: &mut [Option<usize>], seen: &mut [bool]) -> bool {
        for &d in &fits[x] {
            if seen[d] {
                continue;
            }
            seen[d] = true;
            if owner[d].is_none_or(|o| augment(o, fits, owner, seen)) {
                owner[d] = Some(x);
                return true;
            }
        }
        false
    }
    for x in 0..fits.len() {
        let mut seen = vec![false; decisions.len()];
        augment(x, &fits, &mut owner, &mut seen);
    }
    let mut claimed = vec![None; fits.len()];
    for (d, o) in owner.iter().enumerate() {
        if let Some(x) = o {
            claimed[*x] = Some(d);
        }
    }
    claimed
}

/// One decision as a line of a case report: `e2/0 deny job=j2 project=nlp policies=[quota/x] "…"`.
pub fn decision_line(d: &Decision) -> String {
    let mut s = format!("{} {}", d.decision_id, d.decision.as_str());
    if d.dry_run {
        s.push_str(" (dry-run)");
    }
    if d.admission {
        s.push_str(" (admission)");
    }
    if let Some(j) = &d.job_id {
        s.push_str(&format!(" job={j}"));
    }
    if let Some(p) = &d.project {
        s.push_str(&format!(" project={p}"));
    }
    let policies: Vec<&str> = d.policies.iter().map(|p| &**p).collect();
    s.push_str(&format!(" policies=[{}]", policies.join(", ")));
    if let Some(u) = d.until {
        s.push_str(&format!(" until={u}"));
    }
    s.push_str(&format!(" {:?}", d.reason));
    s
}

/// Renders a failed case as a diff: `-` expected but absent, `!` forbidden but present, `+` unexpected
/// (strict), `=` matched, blank for unchecked decisions.
pub fn render_failure(r: &CaseResult) -> String {
    let mut s = String::new();
    for (line, x) in &r.missing {
        s.push_str(&format!("    - expected {x}    ({}:{line})\n", r.file));
    }
    for (line, x) in &r.forbidden {
        s.push_str(&format!("    ! forbidden {x}    ({}:{line})\n", r.file));
    }
    if r.decisions.is_empty() {
        s.push_str("    actual: no decisions\n");
    } else {
        s.push_str(&format!("    actual ({} decision(s); = matched, + unexpected, ! forbidden):\n", r.decisions.len()));
        for (m, d) in &r.decisions {
            let sign = match m {
                Mark::Matched => '=',
                Mark::Unexpected => '+',
                Mark::Forbidden => '!',
                Mark::Unchecked => ' ',
            };
            s.push_str(&format!("    {sign} {}\n", decision_line(d)));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::parse_test_file;

    const SUB1: &str = r#"{"id":"e1","time":"2026-11-02T09:00:00Z","type":"job.submitted","job":{"id":"j1","project":"nlp","user":"alice","gpus":8,"requested_hours":4.0}}"#;
    const SUB2: &str = r#"{"id":"e2","time":"2026-11-02T09:01:00Z","type":"job.submitted","job":{"id":"j2","project":"cv","user":"bob","gpus":2,"requested_hours":1.0}}"#;

    fn case(body: &str) -> Case {
        let src = format!("[[case]]\nname = \"c\"\nevents = \"\"\"\n{SUB1}\n{SUB2}\n\"\"\"\n{body}");
        parse_test_file(Path::new("t.test.toml"), &src).unwrap().cases.remove(0)
    }

    fn empty() -> Arc<PolicySet> {
        Arc::new(PolicySet::empty())
    }

    #[test]
    fn empty_set_allows_every_job_and_the_case_passes() {
        let c = case(
            "strict = true\n[[case.expect]]\ndecision = \"allow\"\njob = \"j1\"\npolicies = []\nreason_contains = \"no policy applies\"\n[[case.expect]]\ndecision = \"allow\"\njob = \"j2\"\ngpu_hours = 2.0\n",
        );
        let r = run_case(&empty(), "t.test.toml", &c, None);
        assert!(r.passed, "{}", render_failure(&r));
        assert_eq!(r.decisions.len(), 2);
    }

    #[test]
    fn a_wrong_expectation_fails_with_a_diff_naming_both_sides() {
        let c = case("[[case.expect]]\ndecision = \"deny\"\njob = \"j2\"\npolicies = [\"quota/x\"]\n");
        let r = run_case(&empty(), "t.test.toml", &c, None);
        assert!(!r.passed);
        let out = render_failure(&r);
        assert!(out.contains("- expected deny job=j2 policies=[quota/x]    (t.test.toml:7)"), "{out}");
        assert!(
            out.contains(r#"  e2/0 allow (admission) job=j2 project=cv policies=[] "no policy applies to this job""#),
            "{out}"
        );
    }

    #[test]
    fn strict_reports_unclaimed_decisions_and_absent_reports_forbidden_ones() {
        let c = case("strict = true\n[[case.expect]]\ndecision = \"allow\"\njob = \"j1\"\n");
        let r = run_case(&empty(), "t.test.toml", &c, None);
        assert!(!r.passed);
        assert_eq!(r.decisions[0].0, Mark::Matched);
        assert_eq!(r.decisions[1].0, Mark::Unexpected);
        assert!(render_failure(&r).contains("    + e2/0 allow"), "{}", render_failure(&r));

        let c = case("[[case.absent]]\ndecision = \"allow\"\nproject = \"cv\"\n");
        let r = run_case(&empty(), "t.test.toml", &c, None);
        assert!(!r.passed);
        assert_eq!(r.forbidden, vec![(7, "allow project=cv".to_owned())]);
        assert_eq!(r.decisions[1].0, Mark::Forbidden);
    }

    #[test]
    fn matching_does_not_let_a_general_expectation_steal_a_precise_ones_decision() {
        // The first expectation fits both decisions, the second only j1's: a greedy match would give
        // j1's decision to the first and fail the second.
        let c = case("[[case.expect]]\ndecision = \"allow\"\n[[case.expect]]\ndecision = \"allow\"\njob = \"j1\"\n");
        let r = run_case(&empty(), "t.test.toml", &c, None);
        assert!(r.passed, "{}", render_failure(&r));
        // Three expectations for two decisions: one must be missing.
        let c = case(
            "[[case.expect]]\ndecision = \"allow\"\n[[case.expect]]\ndecision = \"allow\"\n[[case.expect]]\ndecision = \"allow\"\n",
        );
        let r = run_case(&empty(), "t.test.toml", &c, None);
        assert_eq!(r.missing.len(), 1);
    }

    #[test]
    fn finds_test_files_recursively_in_sorted_order() {
        let dir = std::env::temp_dir().join(format!("bursar-pt-find-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::create_dir_all(dir.join(".git")).unwrap();
        for f in ["b.test.toml", "a.test.toml", "sub/c.test.toml", ".git/x.test.toml", "quota.toml"] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        let found = find_test_files(&dir).unwrap();
        let names: Vec<String> = found.iter().map(|p| p.strip_prefix(&dir).unwrap().display().to_string()).collect();
        assert_eq!(names, ["a.test.toml", "b.test.toml", "sub/c.test.toml"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
