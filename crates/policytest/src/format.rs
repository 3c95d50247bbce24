//! The policy test-file format (`*.test.toml`), parsed into [`TestFile`]s with locations.
//!
//! A test file holds named `[[case]]` tables. Each gives events (inline JSON Lines in `events`, or a
//! file in `events_file`, relative to the test file) and the decisions it expects (`[[case.expect]]`),
//! matched on the fields that matter; `[[case.absent]]` names decisions that must not appear, and
//! `strict = true` (per case, or at the top of the file for every case) fails the case on any non-alert
//! decision no expectation claimed. Unknown keys are errors, so a typo (`resaon_contains`) cannot turn an
//! expectation into one that always passes. The full reference is `docs/testing-policies.md`.
//!
//! Every error carries `file:line:col`; an event line that does not decode is reported with its line in
//! the test file (or in the events file).

use std::ops::Range;
use std::path::{Path, PathBuf};

use bursar_model::{Decision, DecisionKind, Input, Timestamp};
use bursar_session::{Frame, Framer, Line, Origin, decode};
use serde::Deserialize;
use toml::Spanned;

/// An error in a test file, located.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize)]
#[error("{file}:{line}:{column}: {message}")]
pub struct FormatError {
    /// The file.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong, lowercase.
    pub message: String,
}

impl FormatError {
    fn at(file: &str, source: &str, offset: usize, message: impl Into<String>) -> FormatError {
        let (line, column) = line_col(source, offset);
        FormatError { file: file.to_owned(), line, column, message: message.into() }
    }
}

/// 1-based line and column (in characters) of byte `offset` in `source`.
pub fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(source.len());
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// One parsed test file.
#[derive(Debug, Clone)]
pub struct TestFile {
    /// The path, as found.
    pub path: PathBuf,
    /// Its cases, in file order.
    pub cases: Vec<Case>,
}

/// One input of a case (an event, or an action record), with where it was written.
#[derive(Debug, Clone)]
pub struct CaseEvent {
    /// The line as written.
    pub raw: String,
    /// The decoded input.
    pub input: Input,
}

/// A named test case.
#[derive(Debug, Clone)]
pub struct Case {
    /// The case's name (unique in its file).
    pub name: String,
    /// Line of `name = …` in the test file.
    pub line: usize,
    /// The events, in order.
    pub events: Vec<CaseEvent>,
    /// Decisions that must appear (each claims a distinct decision).
    pub expect: Vec<Expectation>,
    /// Decisions that must not appear.
    pub absent: Vec<Expectation>,
    /// Fail on any non-alert decision that no expectation claimed.
    pub strict: bool,
}

/// What an expected (or forbidden) decision must look like; unset fields match anything.
#[derive(Debug, Clone, PartialEq)]
pub struct Expectation {
    /// The decision kind.
    pub decision: Option<DecisionKind>,
    /// The job id.
    pub job: Option<String>,
    /// The id of the event that caused the decision.
    pub event: Option<String>,
    /// The project.
    pub project: Option<String>,
    /// The policies that produced it, compared as a set (`[]` means none, as for an unopposed allow).
    pub policies: Option<Vec<String>>,
    /// Substrings the reason must contain.
    pub reason_contains: Vec<String>,
    /// Whether it is a shadow (dry-run) decision; expectations match enforced decisions by default.
    pub dry_run: bool,
    /// Whether it is an admission decision.
    pub admission: Option<bool>,
    /// For `defer`: the time the job may start.
    pub until: Option<Timestamp>,
    /// GPU-hours concerned (compared to 1e-6).
    pub gpu_hours: Option<f64>,
    /// Line of the table in the test file.
    pub line: usize,
}

impl Expectation {
    /// Does `d` satisfy every field that is set?
    pub fn matches(&self, d: &Decision) -> bool {
        self.decision.is_none_or(|k| k == d.decision)
            && self.job.as_deref().is_none_or(|j| d.job_id.as_deref() == Some(j))
            && self.event.as_deref().is_none_or(|e| d.event_id == e)
            && self.project.as_deref().is_none_or(|p| d.project.as_deref() == Some(p))
            && self.policies.as_ref().is_none_or(|want| {
                let mut got: Vec<&str> = d.policies.iter().map(|p| &**p).collect();
                got.sort_unstable();
                got.dedup();
                got.len() == want.len() && got.iter().zip(want).all(|(a, b)| *a == b)
            })
            && self.reason_contains.iter().all(|s| d.reason.contains(s.as_str()))
            && self.dry_run == d.dry_run
            && self.admission.is_none_or(|a| a == d.admission)
            && self.until.is_none_or(|u| d.until == Some(u))
            && self.gpu_hours.is_none_or(|h| d.gpu_hours.is_some_and(|g| (g - h).abs() < 1e-6))
    }

    /// The expectation in the shape of a decision line: `deny job=j2 policies=[quota/x] reason~"…"`.
    pub fn describe(&self) -> String {
        let mut s = self.decision.map_or_else(|| "any".to_owned(), |k| k.as_str().to_owned());
        if self.dry_run {
            s.push_str(" (dry-run)");
        }
        if let Some(e) = &self.event {
            s.push_str(&format!(" event={e}"));
        }
        if let Some(j) = &self.job {
            s.push_str(&format!(" job={j}"));
        }
        if let Some(p) = &self.project {
            s.push_str(&format!(" project={p}"));
        }
        if let Some(p) = &self.policies {
            s.push_str(&format!(" policies=[{}]", p.join(", ")));
        }
        if let Some(a) = self.admission {
            s.push_str(&format!(" admission={a}"));
        }
        if let Some(u) = self.until {
            s.push_str(&format!(" until={u}"));
        }
        if let Some(h) = self.gpu_hours {
            s.push_str(&format!(" gpu_hours={h}"));
        }
        for r in &self.reason_contains {
            s.push_str(&format!(" reason~{r:?}"));
        }
        s
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    strict: Option<bool>,
    #[serde(default, rename = "case")]
    cases: Vec<Spanned<RawCase>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCase {
    name: Spanned<String>,
    #[serde(default)]
    #[expect(dead_code, reason = "documentation for readers of the test file; accepted and ignored")]
    description: Option<String>,
    #[serde(default)]
    events: Option<Spanned<String>>,
    #[serde(default)]
    events_file: Option<Spanned<String>>,
    #[serde(default)]
    strict: Option<bool>,
    #[serde(default)]
    expect: Vec<Spanned<RawExpect>>,
    #[serde(default)]
    absent: Vec<Spanned<RawExpect>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExpect {
    #[serde(default)]
    decision: Option<Spanned<String>>,
    #[serde(default)]
    job: Option<String>,
    #[serde(default)]
    event: Option<String>,
    #[serde(default)]
    project: Option<String>,
    #[serde(default)]
    policies: Option<Vec<String>>,
    #[serde(default)]
    reason_contains: Option<StringOrList>,
    #[serde(default)]
    dry_run: Option<bool>,
    #[serde(default)]
    admission: Option<bool>,
    #[serde(default)]
    until: Option<Spanned<String>>,
    #[serde(default)]
    gpu_hours: Option<f64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum StringOrList {
    One(String),
    Many(Vec<String>),
}

/// Parses the text of a test file. `path` names the file in errors and resolves `events_file`.
pub fn parse_test_file(path: &Path, source: &str) -> Result<TestFile, Vec<FormatError>> {
    let file = path.display().to_string();
    let raw: RawFile = toml::from_str(source).map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        vec![FormatError::at(&file, source, offset, e.message().trim_end().to_owned())]
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut errors = Vec::new();
    let mut cases: Vec<Case> = Vec::new();
    for rc in raw.cases {
        let case_span = rc.span();
        let rc = rc.into_inner();
        let name_span = rc.name.span();
        let name = rc.name.into_inner();
        let line = line_col(source, name_span.start).0;
        if name.trim().is_empty() {
            errors.push(FormatError::at(&file, source, name_span.start, "case name is empty"));
        }
        if let Some(prev) = cases.iter().find(|c| c.name == name) {
            errors.push(FormatError::at(
                &file,
                source,
                name_span.start,
                format!("case `{name}` is defined twice (first at line {})", prev.line),
            ));
        }
        let events = match (rc.events, rc.events_file) {
            (Some(inline), None) => {
                let span = inline.span();
                decode_inline(&file, source, span, inline.get_ref(), &mut errors)
            }
            (None, Some(f)) => {
                let p = base.join(f.get_ref());
                match std::fs::read_to_string(&p) {
                    Ok(text) => decode_lines(&p.display().to_string(), &text, 1, &mut errors),
                    Err(e) => {
                        errors.push(FormatError::at(
                            &file,
                            source,
                            f.span().start,
                            format!("cannot read events file `{}`: {e}", p.display()),
                        ));
                        Vec::new()
                    }
                }
            }
            (Some(inline), Some(_)) => {
                errors.push(FormatError::at(
                    &file,
                    source,
                    inline.span().start,
                    format!("case `{name}` gives both `events` and `events_file`; keep one"),
                ));
                Vec::new()
            }
            (None, None) => {
                errors.push(FormatError::at(
                    &file,
                    source,
                    case_span.start,
                    format!("case `{name}` has no events: add `events = \"\"\"…\"\"\"` or `events_file = \"…\"`"),
                ));
                Vec::new()
            }
        };
        let mut expect = Vec::new();
        for e in rc.expect {
            if let Some(x) = expectation(&file, source, e, true, &mut errors) {
                expect.push(x);
            }
        }
        let mut absent = Vec::new();
        for e in rc.absent {
            if let Some(x) = expectation(&file, source, e, false, &mut errors) {
                absent.push(x);
            }
        }
        if expect.is_empty() && absent.is_empty() && rc.strict.or(raw.strict) != Some(true) {
            errors.push(FormatError::at(
                &file,
                source,
                case_span.start,
                format!("case `{name}` checks nothing: add `[[case.expect]]`, `[[case.absent]]` or `strict = true`"),
            ));
        }
        cases.push(Case { name, line, events, expect, absent, strict: rc.strict.or(raw.strict).unwrap_or(false) });
    }
    if errors.is_empty() { Ok(TestFile { path: path.to_path_buf(), cases }) } else { Err(errors) }
}

fn expectation(
    file: &str,
    source: &str,
    raw: Spanned<RawExpect>,
    need_decision: bool,
    errors: &mut Vec<FormatError>,
) -> Option<Expectation> {
    let span = raw.span();
    let raw = raw.into_inner();
    let line = line_col(source, span.start).0;
    let mut ok = true;
    let decision = match &raw.decision {
        Some(d) => match DecisionKind::parse(d.get_ref()) {
            Some(k) => Some(k),
            None => {
                errors.push(FormatError::at(
                    file,
                    source,
                    d.span().start,
                    format!(
                        "`{}` is not a decision (expected one of allow, deny, require_approval, defer, reclaim, alert)",
                        d.get_ref()
                    ),
                ));
                ok = false;
                None
            }
        },
        None if need_decision => {
            errors.push(FormatError::at(file, source, span.start, "an expectation needs `decision = \"…\"`"));
            ok = false;
            None
        }
        None => None,
    };
    let until = match &raw.until {
        Some(u) => match Timestamp::parse(u.get_ref()) {
            Ok(t) => Some(t),
            Err(e) => {
                errors.push(FormatError::at(file, source, u.span().start, e.to_string()));
                ok = false;
                None
            }
        },
        None => None,
    };
    let policies = raw.policies.map(|mut p| {
        p.sort();
        p.dedup();
        p
    });
    let reason_contains = match raw.reason_contains {
        None => Vec::new(),
        Some(StringOrList::One(s)) => vec![s],
        Some(StringOrList::Many(v)) => v,
    };
    ok.then_some(Expectation {
        decision,
        job: raw.job,
        event: raw.event,
        project: raw.project,
        policies,
        reason_contains,
        dry_run: raw.dry_run.unwrap_or(false),
        admission: raw.admission,
        until,
        gpu_hours: raw.gpu_hours,
        line,
    })
}

/// Decodes the inline `events` string whose literal sits at `span` of `source`, so that a bad line is
/// reported at its line in the test file.
fn decode_inline(
    file: &str,
    source: &str,
    span: Range<usize>,
    value: &str,
    errors: &mut Vec<FormatError>,
) -> Vec<CaseEvent> {
    let literal = source.get(span.clone()).unwrap_or("");
    let mut skip = 0;
    if literal.starts_with("\"\"\"") || literal.starts_with("'''") {
        skip = 3;
        let rest = &literal[3..];
        if rest.starts_with("\r\n") {
            skip += 2;
        } else if rest.starts_with('\n') {
            skip += 1;
        }
    } else if literal.starts_with('"') || literal.starts_with('\'') {
        skip = 1;
    }
    let first_line = line_col(source, span.start + skip).0;
    decode_lines(file, value, first_line, errors)
}

/// Decodes JSON Lines through the session's decoder, under a producer's rules (so a test case can no
/// more send bursar's own wall tick than a producer can); blank lines and lines starting with `#` or
/// `//` (comments, which a test file may have) are skipped.
fn decode_lines(file: &str, text: &str, first_line: usize, errors: &mut Vec<FormatError>) -> Vec<CaseEvent> {
    let mut out = Vec::new();
    Framer::body(text.as_bytes(), usize::MAX, |frame| {
        let Frame::Line { line, bytes } = frame else { return };
        let Ok(raw) = std::str::from_utf8(bytes) else { return };
        let t = raw.trim();
        if t.is_empty() || t.starts_with('#') || t.starts_with("//") {
            return;
        }
        match decode(Frame::Line { line, bytes: t.as_bytes() }, Origin::Producer) {
            Line::Input(d) => out.push(CaseEvent { raw: t.to_owned(), input: d.input }),
            Line::Blank => {}
            Line::Rejected(r) => {
                let column = raw.len() - raw.trim_start().len() + 1;
                errors.push(FormatError {
                    file: file.to_owned(),
                    line: first_line + usize::try_from(line).unwrap_or(0) - 1,
                    column,
                    message: format!("event does not decode: {}", r.error),
                })
            }
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUB: &str = r#"{"id":"e1","time":"2026-11-02T09:00:00Z","type":"job.submitted","job":{"id":"j1","project":"nlp","user":"alice","gpus":8,"requested_hours":4.0}}"#;

    fn parse(src: &str) -> Result<TestFile, Vec<FormatError>> {
        parse_test_file(Path::new("t.test.toml"), src)
    }

    #[test]
    fn parses_a_case_with_inline_events_and_expectations() {
        let src = format!(
            "strict = true\n[[case]]\nname = \"small job\"\nevents = \"\"\"\n{SUB}\n\"\"\"\n[[case.expect]]\ndecision = \"allow\"\njob = \"j1\"\npolicies = []\nreason_contains = \"no policy\"\n"
        );
        let f = parse(&src).unwrap();
        assert_eq!(f.cases.len(), 1);
        let c = &f.cases[0];
        assert_eq!(c.name, "small job");
        assert_eq!(c.line, 3);
        assert!(c.strict);
        assert_eq!(c.events.len(), 1);
        assert_eq!(c.expect[0].decision, Some(DecisionKind::Allow));
        assert_eq!(c.expect[0].policies, Some(vec![]));
        assert_eq!(c.expect[0].reason_contains, vec!["no policy".to_owned()]);
        assert_eq!(c.expect[0].line, 7);
    }

    #[test]
    fn a_bad_event_line_is_reported_at_its_line_in_the_test_file() {
        let src = format!(
            "[[case]]\nname = \"x\"\nevents = \"\"\"\n{SUB}\n{{\"id\":\"e2\",\"time\":\"nope\",\"type\":\"clock.tick\"}}\n\"\"\"\nstrict = true\n"
        );
        let errs = parse(&src).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert_eq!(errs[0].line, 5, "{errs:?}");
        assert!(errs[0].message.starts_with("event does not decode"), "{errs:?}");
    }

    #[test]
    fn typos_and_unknown_decisions_are_errors_with_locations() {
        let src = format!(
            "[[case]]\nname = \"x\"\nevents = '{SUB}'\n[[case.expect]]\ndecision = \"deny\"\nresaon_contains = \"quota\"\n"
        );
        let errs = parse(&src).unwrap_err();
        assert!(errs[0].message.contains("resaon_contains"), "{errs:?}");
        assert_eq!(errs[0].line, 6, "{errs:?}");

        let src = format!("[[case]]\nname = \"x\"\nevents = '{SUB}'\n[[case.expect]]\ndecision = \"refuse\"\n");
        let errs = parse(&src).unwrap_err();
        assert_eq!((errs[0].line, errs[0].column), (5, 12), "{errs:?}");
        assert!(errs[0].message.contains("`refuse` is not a decision"), "{errs:?}");
    }

    #[test]
    fn a_case_must_check_something_and_names_are_unique() {
        let src = format!("[[case]]\nname = \"x\"\nevents = '{SUB}'\n");
        let errs = parse(&src).unwrap_err();
        assert!(errs[0].message.contains("checks nothing"), "{errs:?}");

        let src = format!(
            "strict = true\n[[case]]\nname = \"x\"\nevents = '{SUB}'\n[[case]]\nname = \"x\"\nevents = '{SUB}'\n"
        );
        let errs = parse(&src).unwrap_err();
        assert!(errs[0].message.contains("defined twice (first at line 3)"), "{errs:?}");
    }

    #[test]
    fn events_file_is_relative_to_the_test_file() {
        let dir = std::env::temp_dir().join(format!("bursar-pt-format-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("fixtures")).unwrap();
        std::fs::write(dir.join("fixtures/ev.jsonl"), format!("# a comment\n{SUB}\n")).unwrap();
        let src = "strict = true\n[[case]]\nname = \"x\"\nevents_file = \"fixtures/ev.jsonl\"\n";
        let f = parse_test_file(&dir.join("a.test.toml"), src).unwrap();
        assert_eq!(f.cases[0].events.len(), 1);
        let src = "strict = true\n[[case]]\nname = \"x\"\nevents_file = \"fixtures/missing.jsonl\"\n";
        let errs = parse_test_file(&dir.join("a.test.toml"), src).unwrap_err();
        assert!(errs[0].message.contains("cannot read events file"), "{errs:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn policies_compare_as_sets_and_dry_run_must_agree() {
        let d: Decision = serde_json::from_str(
            r#"{"decision_id":"e1/0","event_id":"e1","time":"2026-11-02T09:00:00Z","job_id":"j1","project":"nlp","decision":"deny","policies":["b","a"],"reason":"over quota by 3"}"#,
        )
        .unwrap();
        let mut x = Expectation {
            decision: Some(DecisionKind::Deny),
            job: Some("j1".into()),
            event: None,
            project: None,
            policies: Some(vec!["a".into(), "b".into()]),
            reason_contains: vec!["quota".into()],
            dry_run: false,
            admission: None,
            until: None,
            gpu_hours: None,
            line: 1,
        };
        assert!(x.matches(&d));
        x.policies = Some(vec!["a".into()]);
        assert!(!x.matches(&d));
        x.policies = None;
        x.dry_run = true;
        assert!(!x.matches(&d));
        x.dry_run = false;
        x.reason_contains.push("missing".into());
        assert!(!x.matches(&d));
        assert_eq!(x.describe(), "deny job=j1 reason~\"quota\" reason~\"missing\"",);
    }
}
