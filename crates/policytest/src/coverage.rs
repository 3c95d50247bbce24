//! Branch coverage of a policy set by a test suite.
//!
//! The engine records `(policy id, branch index)` for every verdict a policy returns while coverage is
//! enabled ([`bursar_engine::Engine::enable_coverage`]); branch names come from
//! [`bursar_engine::PolicyMeta::branches`] (one per rule or condition of a TOML policy). A policy that
//! names no branches (a WebAssembly component that does not report them, say) counts as one branch,
//! `(any verdict)`, covered when the policy appears in any decision of any case.

use std::collections::BTreeSet;
use std::sync::Arc;

use bursar_engine::{Coverage, PolicySet};
use serde::Serialize;

/// The name of the single branch of a policy that declares none.
pub const ANY_VERDICT: &str = "(any verdict)";

/// Coverage of one branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BranchCoverage {
    /// Branch name.
    pub name: String,
    /// Whether any case took it.
    pub covered: bool,
}

/// Coverage of one policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyCoverage {
    /// Policy id.
    pub id: String,
    /// The file it came from.
    pub source: String,
    /// Its branches, in declaration order.
    pub branches: Vec<BranchCoverage>,
}

/// Coverage of a whole set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CoverageReport {
    /// Per policy, in set order.
    pub policies: Vec<PolicyCoverage>,
    /// Branches taken.
    pub covered: usize,
    /// Branches in all.
    pub total: usize,
    /// `covered / total` in percent (100 for an empty set).
    pub percent: f64,
}

impl CoverageReport {
    /// Builds the report from the branches the engine recorded and the policy ids that appeared in
    /// decisions (for policies that declare no branches).
    pub fn build(set: &PolicySet, taken: &Coverage, in_decisions: &BTreeSet<Arc<str>>) -> CoverageReport {
        let mut policies = Vec::new();
        let (mut covered, mut total) = (0, 0);
        for p in set.policies() {
            let meta = p.meta();
            let branches: Vec<BranchCoverage> = if meta.branches.is_empty() {
                vec![BranchCoverage { name: ANY_VERDICT.to_owned(), covered: in_decisions.contains(&meta.id) }]
            } else {
                meta.branches
                    .iter()
                    .enumerate()
                    // An empty name is a branch this policy's configuration can never take.
                    .filter(|(_, name)| !name.is_empty())
                    .map(|(i, name)| BranchCoverage {
                        name: name.clone(),
                        covered: u16::try_from(i).is_ok_and(|i| taken.contains(&(meta.id.clone(), i))),
                    })
                    .collect()
            };
            total += branches.len();
            covered += branches.iter().filter(|b| b.covered).count();
            policies.push(PolicyCoverage { id: meta.id.to_string(), source: meta.source.clone(), branches });
        }
        let percent = if total == 0 { 100.0 } else { covered as f64 * 100.0 / total as f64 };
        CoverageReport { policies, covered, total, percent }
    }

    /// `(policy id, branch name)` of every branch no case took.
    pub fn untested(&self) -> Vec<(&str, &str)> {
        self.policies
            .iter()
            .flat_map(|p| p.branches.iter().filter(|b| !b.covered).map(|b| (p.id.as_str(), b.name.as_str())))
            .collect()
    }

    /// The report for people: one line per policy, then the untested branches.
    pub fn render(&self) -> String {
        let mut s = String::from("coverage:\n");
        let width = self.policies.iter().map(|p| p.id.len()).max().unwrap_or(0);
        for p in &self.policies {
            let c = p.branches.iter().filter(|b| b.covered).count();
            s.push_str(&format!("  {:<width$}  {c}/{} branches\n", p.id, p.branches.len()));
        }
        let untested = self.untested();
        if !untested.is_empty() {
            s.push_str("untested branches:\n");
            for (id, b) in untested {
                s.push_str(&format!("  {id}: {b}\n"));
            }
        }
        s.push_str(&format!("total: {}/{} branches covered ({:.1}%)\n", self.covered, self.total, self.percent));
        s
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use bursar_engine::Mode;

    use crate::fixtures;
    use crate::format::parse_test_file;
    use crate::suite::{SuiteOptions, run_suite};

    const SMALL: &str = r#"{"id":"e1","time":"2026-11-02T09:00:00Z","type":"job.submitted","job":{"id":"j1","project":"nlp","user":"alice","gpus":2,"requested_hours":4.0}}"#;
    const BIG: &str = r#"{"id":"e2","time":"2026-11-02T09:01:00Z","type":"job.submitted","job":{"id":"j2","project":"nlp","user":"alice","gpus":16,"requested_hours":4.0}}"#;

    fn cases(events: &[&str]) -> crate::TestFile {
        let src = format!("[[case]]\nname = \"c\"\nstrict = true\nevents = \"\"\"\n{}\n\"\"\"\n", events.join("\n"));
        parse_test_file(Path::new("t.test.toml"), &src).unwrap()
    }

    #[test]
    fn names_the_branches_no_case_took() {
        let set = fixtures::set(&[("cap/eight", 8, Mode::Enforce)]);
        let opts = SuiteOptions { filter: None, coverage: true };
        let r = run_suite(&set, &[cases(&[SMALL])], Vec::new(), &opts);
        let cov = r.coverage.unwrap();
        assert_eq!(cov.untested(), vec![("cap/eight", "over cap"), ("cap/eight", "over a thousand")]);
        assert_eq!((cov.covered, cov.total), (1, 3));
        let text = cov.render();
        assert!(text.contains("untested branches:\n  cap/eight: over cap\n  cap/eight: over a thousand\n"), "{text}");
        assert!(text.contains("total: 1/3 branches covered (33.3%)"), "{text}");

        let r = run_suite(&set, &[cases(&[SMALL, BIG])], Vec::new(), &opts);
        let cov = r.coverage.unwrap();
        assert_eq!(cov.untested(), vec![("cap/eight", "over a thousand")]);
    }

    #[test]
    fn coverage_is_off_unless_asked_for() {
        let set = fixtures::set(&[("cap/eight", 8, Mode::Enforce)]);
        let r = run_suite(&set, &[cases(&[SMALL])], Vec::new(), &SuiteOptions::default());
        assert!(r.coverage.is_none());
    }
}
