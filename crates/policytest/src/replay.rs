//! Replay: re-evaluate recorded history under a candidate policy set from a clean state and report what
//! would have changed against what was decided (decisions recorded in the audit log) or against a
//! baseline set evaluated on the same events.
//!
//! The [`Replayer`] is fed one event at a time, so memory holds the aggregates and the first N changed
//! decisions, not the history. Decisions are compared within each event, keyed by
//! `(job id, admission-or-kind, dry-run, occurrence)` — never by `decision_id`, whose numbering shifts
//! when a decision appears or disappears. Everything is kept in ordered maps and summed in event order,
//! so the same inputs give a byte-identical report.
//!
//! Shadow mode: decisions of `dry_run` policies are counted apart, and each one whose kind the enforced
//! decisions about the same job on the same event do not share is reported as "would have done
//! differently", with its GPU-hours.

use std::collections::BTreeMap;
use std::sync::Arc;

use bursar_engine::{Engine, EngineConfig, PolicySet};
use bursar_model::api::Rejected;
use bursar_model::{Decision, DecisionKind, Event, Input, Timestamp};
use bursar_session::{Applied, Line, Memory, Origin, Session, decode};
use serde::Serialize;

/// A count (or a sum) on both sides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Delta<T> {
    /// What was decided (or what the baseline decides).
    pub baseline: T,
    /// What the candidate decides.
    pub candidate: T,
}

/// One side of a changed decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    /// The decision kind.
    pub decision: DecisionKind,
    /// Its policies.
    pub policies: Vec<Arc<str>>,
    /// Its reason.
    pub reason: String,
    /// GPU-hours concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_hours: Option<f64>,
    /// For a defer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

impl Side {
    fn of(d: &Decision) -> Side {
        Side {
            decision: d.decision,
            policies: d.policies.clone(),
            reason: d.reason.clone(),
            gpu_hours: d.gpu_hours,
            until: d.until.map(|u| u.to_string()),
        }
    }
}

/// A decision that differs between the sides (or exists on one side only).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// The event that caused it.
    pub event_id: String,
    /// Event time.
    pub time: String,
    /// The job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<Arc<str>>,
    /// The project.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<Arc<str>>,
    /// `admission`, or the decision kind for other decisions.
    pub slot: String,
    /// A shadow decision.
    pub dry_run: bool,
    /// The baseline's decision, if it made one.
    pub baseline: Option<Side>,
    /// The candidate's decision, if it makes one.
    pub candidate: Option<Side>,
}

/// What a project's decisions add up to, on both sides.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProjectDelta {
    /// Decisions that changed.
    pub changed: u64,
    /// Enforced decisions by kind.
    pub decisions: BTreeMap<&'static str, Delta<u64>>,
    /// GPU-hours of enforced decisions by kind (deny, defer, require_approval, reclaim).
    pub gpu_hours: BTreeMap<&'static str, Delta<f64>>,
}

/// What the dry-run decisions of one policy and kind amount to.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Shadow {
    /// Dry-run decisions made.
    pub decisions: u64,
    /// Of those, how many the enforced decisions about the same job and event do not share.
    pub differ: u64,
    /// GPU-hours of the ones that differ.
    pub gpu_hours: f64,
}

/// The replay report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReplayReport {
    /// What the candidate is (a path).
    pub candidate: String,
    /// What it is compared with: a path, or the audit log.
    pub baseline: String,
    /// Events applied.
    pub events: u64,
    /// Events ignored as duplicates (same id).
    pub duplicates: u64,
    /// Lines that were not valid events.
    pub malformed: u64,
    /// Events the candidate refused (beyond the clock bound, a second submission of a known job).
    pub refused: u64,
    /// Decisions compared (keys on either side).
    pub compared: u64,
    /// Decisions equal on both sides (kind, policies, until).
    pub unchanged: u64,
    /// Of those, decisions whose reason alone changed.
    pub reworded: u64,
    /// Decisions that exist on both sides but differ.
    pub different: u64,
    /// Decisions only the candidate makes.
    pub added: u64,
    /// Decisions only the baseline made.
    pub removed: u64,
    /// Enforced decisions by kind.
    pub decisions: BTreeMap<&'static str, Delta<u64>>,
    /// Dry-run decisions by kind.
    pub dry_run_decisions: BTreeMap<&'static str, Delta<u64>>,
    /// GPU-hours of enforced decisions by kind: denied, deferred, held for approval, reclaimed.
    pub gpu_hours: BTreeMap<&'static str, Delta<f64>>,
    /// Enforced decisions naming each policy, by kind (allows excluded: an allow names every policy
    /// that did not object).
    pub policies: BTreeMap<String, BTreeMap<&'static str, Delta<u64>>>,
    /// Per project.
    pub projects: BTreeMap<String, ProjectDelta>,
    /// Admission outcomes whose kind changed, `from -> to` (`none` when one side made no admission
    /// decision for that event): (jobs, GPU-hours requested).
    pub admission_changes: BTreeMap<String, (u64, f64)>,
    /// Shadow decisions, by side (`baseline`, `candidate`), policy and kind.
    pub shadow: BTreeMap<String, BTreeMap<String, BTreeMap<&'static str, Shadow>>>,
    /// The first changed decisions, in event order.
    pub changes: Vec<Change>,
}

const HOURS_KINDS: [DecisionKind; 4] =
    [DecisionKind::Deny, DecisionKind::Defer, DecisionKind::RequireApproval, DecisionKind::Reclaim];

/// Which baseline a replay compares with.
#[derive(Debug)]
enum Base {
    /// Another set, evaluated on the same events.
    Policies(Box<Session<Memory>>),
    /// The decisions recorded with each event.
    Recorded,
}

/// Feeds inputs to the candidate (and baseline) session and accumulates the report.
#[derive(Debug)]
pub struct Replayer {
    candidate: Session<Memory>,
    base: Base,
    limit: usize,
    report: ReplayReport,
    origin: Origin,
}

/// What one session did with an input.
enum Stepped {
    Applied(Vec<Decision>),
    Duplicate,
    Refused(String),
}

/// The decisions `session` made for `input`.
fn step(session: &mut Session<Memory>, input: &Input, raw: &str) -> Stepped {
    session.journal_mut().clear();
    match session.apply(input, raw) {
        Ok(Applied::Applied { .. }) => Stepped::Applied(std::mem::take(&mut session.journal_mut().decisions)),
        Ok(Applied::Refused(r)) => Stepped::Refused(r.reason),
        // A memory journal never fails.
        Ok(Applied::Duplicate) | Err(_) => Stepped::Duplicate,
    }
}

type Key<'a> = (Option<&'a str>, &'static str, bool, usize);

fn keyed(ds: &[Decision]) -> BTreeMap<Key<'_>, &Decision> {
    let mut out: BTreeMap<Key<'_>, &Decision> = BTreeMap::new();
    for d in ds {
        let slot = if d.admission { "admission" } else { d.decision.as_str() };
        let mut n = 0;
        while out.contains_key(&(d.job_id.as_deref(), slot, d.dry_run, n)) {
            n += 1;
        }
        out.insert((d.job_id.as_deref(), slot, d.dry_run, n), d);
    }
    out
}

fn sorted(p: &[Arc<str>]) -> Vec<&str> {
    let mut v: Vec<&str> = p.iter().map(|s| &**s).collect();
    v.sort_unstable();
    v
}

fn same(a: &Decision, b: &Decision) -> bool {
    a.decision == b.decision && a.until == b.until && sorted(&a.policies) == sorted(&b.policies)
}

impl Replayer {
    /// Compares `candidate` with `baseline` evaluated on the same events (read as a producer's).
    pub fn against_policies(candidate: Arc<PolicySet>, baseline: Arc<PolicySet>, config: EngineConfig) -> Replayer {
        let base = Session::new(Engine::with_config(baseline, config), Memory::default(), Origin::Producer);
        Replayer::new(candidate, Base::Policies(Box::new(base)), config, Origin::Producer)
    }

    /// Compares `candidate` with the decisions recorded with each input of bursar's own journal (see
    /// [`Replayer::input`]): serve's wall ticks are replayed as wall ticks.
    pub fn against_recorded(candidate: Arc<PolicySet>, config: EngineConfig) -> Replayer {
        Replayer::new(candidate, Base::Recorded, config, Origin::Journal)
    }

    fn new(candidate: Arc<PolicySet>, base: Base, config: EngineConfig, origin: Origin) -> Replayer {
        Replayer {
            candidate: Session::new(Engine::with_config(candidate, config), Memory::default(), origin),
            base,
            limit: 20,
            report: ReplayReport::default(),
            origin,
        }
    }

    /// The origin whose rules decode this replay's lines.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// Keeps at most `limit` changed decisions in the report (20 by default).
    pub fn with_limit(mut self, limit: usize) -> Replayer {
        self.limit = limit;
        self
    }

    /// Bounds how far an input may move the event clock (`--max-clock-jump`), on both sides.
    pub fn with_clock_bound(mut self, bound: bursar_session::ClockBound) -> Replayer {
        self.candidate = self.candidate.with_clock_bound(bound);
        if let Base::Policies(s) = self.base {
            self.base = Base::Policies(Box::new(s.with_clock_bound(bound)));
        }
        self
    }

    /// Names the sides in the report.
    pub fn with_labels(mut self, candidate: impl Into<String>, baseline: impl Into<String>) -> Replayer {
        self.report.candidate = candidate.into();
        self.report.baseline = baseline.into();
        self
    }

    /// Counts a line of the input that was not a valid event.
    pub fn malformed(&mut self) {
        self.report.malformed += 1;
    }

    /// Applies one input (decoded under [`Replayer::origin`]'s rules). `recorded` is what was decided
    /// for it at the time (from the audit log); it is ignored when the baseline is a policy set.
    /// Returns why the input was refused (beyond the clock bound, a second submission of a known
    /// job), if it was.
    pub fn input(&mut self, input: &Input, raw: &str, recorded: &[Decision]) -> Option<String> {
        let cand = step(&mut self.candidate, input, raw);
        let base_own;
        let base: &[Decision] = match &mut self.base {
            Base::Policies(session) => {
                base_own = match step(session, input, raw) {
                    Stepped::Applied(d) => d,
                    Stepped::Duplicate | Stepped::Refused(_) => Vec::new(),
                };
                &base_own
            }
            Base::Recorded => recorded,
        };
        let cand = match cand {
            Stepped::Applied(d) => d,
            Stepped::Duplicate => {
                self.report.duplicates += 1;
                return None;
            }
            Stepped::Refused(reason) => {
                self.report.refused += 1;
                return Some(reason);
            }
        };
        self.report.events += 1;
        compare(&mut self.report, self.limit, &input.id(), input.time(), base, &cand);
        None
    }

    /// [`Replayer::input`] of a producer's event.
    pub fn event(&mut self, event: &Event, raw: Option<&str>, recorded: &[Decision]) {
        let input = Input::Event(event.clone());
        let canonical;
        let raw = match raw {
            Some(r) => r,
            None => {
                canonical = event.to_json();
                &canonical
            }
        };
        let _ = self.input(&input, raw, recorded);
    }

    /// Replays a stream of JSON Lines (an events file), read through the session crate's framing and
    /// decoding; inputs before `since` are skipped; every rejected line is counted and handed to
    /// `on_rejected`.
    pub fn read(
        &mut self,
        source: impl std::io::Read,
        max_line: usize,
        since: Option<Timestamp>,
        mut on_rejected: impl FnMut(&Rejected),
    ) -> std::io::Result<()> {
        let origin = self.origin;
        bursar_session::read_frames(source, max_line, |frame| {
            match decode(frame, origin) {
                Line::Blank => {}
                Line::Rejected(r) => {
                    self.malformed();
                    on_rejected(&r);
                }
                Line::Input(d) => {
                    if since.is_none_or(|s| d.input.time() >= s)
                        && let Some(reason) = self.input(&d.input, d.text, &[])
                    {
                        on_rejected(&Rejected { source: None, line: d.line, error: format!("refused: {reason}") });
                    }
                }
            }
            Ok::<(), std::convert::Infallible>(())
        })
        .map_err(|e| match e {
            bursar_session::ReadError::Read(io) => io,
            bursar_session::ReadError::Stopped(never) => match never {},
        })
    }

    /// The report.
    pub fn finish(self) -> ReplayReport {
        self.report
    }
}

fn compare(r: &mut ReplayReport, limit: usize, event_id: &str, time: Timestamp, base: &[Decision], cand: &[Decision]) {
    count(r, base, false);
    count(r, cand, true);
    shadow(r, "baseline", base);
    shadow(r, "candidate", cand);
    let b = keyed(base);
    let c = keyed(cand);
    let mut keys: Vec<&Key<'_>> = b.keys().chain(c.keys()).collect();
    keys.sort_unstable();
    keys.dedup();
    for k in keys {
        r.compared += 1;
        let (bd, cd) = (b.get(k).copied(), c.get(k).copied());
        match (bd, cd) {
            (Some(x), Some(y)) if same(x, y) => {
                r.unchanged += 1;
                if x.reason != y.reason {
                    r.reworded += 1;
                }
                continue;
            }
            (Some(_), Some(_)) => r.different += 1,
            (None, Some(_)) => r.added += 1,
            (Some(_), None) => r.removed += 1,
            (None, None) => continue,
        }
        let any = cd.or(bd);
        let project = any.and_then(|d| d.project.clone());
        if let Some(p) = &project {
            r.projects.entry(p.to_string()).or_default().changed += 1;
        }
        if k.1 == "admission" && bd.map(|d| d.decision) != cd.map(|d| d.decision) {
            let from = bd.map_or("none", |d| d.decision.as_str());
            let to = cd.map_or("none", |d| d.decision.as_str());
            let hours = cd.or(bd).and_then(|d| d.gpu_hours).unwrap_or(0.0);
            let e = r.admission_changes.entry(format!("{from} -> {to}")).or_default();
            e.0 += 1;
            e.1 += hours;
        }
        if r.changes.len() < limit {
            r.changes.push(Change {
                event_id: event_id.to_owned(),
                time: any.map_or_else(|| time.to_string(), |d| d.time.to_string()),
                job_id: k.0.map(Arc::from),
                project,
                slot: k.1.to_owned(),
                dry_run: k.2,
                baseline: bd.map(Side::of),
                candidate: cd.map(Side::of),
            });
        }
    }
}

fn count(r: &mut ReplayReport, ds: &[Decision], candidate: bool) {
    fn bump<T: Copy + std::ops::AddAssign>(d: &mut Delta<T>, candidate: bool, v: T) {
        if candidate {
            d.candidate += v;
        } else {
            d.baseline += v;
        }
    }
    for d in ds {
        let kind = d.decision.as_str();
        if d.dry_run {
            bump(r.dry_run_decisions.entry(kind).or_default(), candidate, 1);
            continue;
        }
        bump(r.decisions.entry(kind).or_default(), candidate, 1);
        // An allow names every policy that did not object: counting those says nothing.
        if d.decision != DecisionKind::Allow {
            for p in &d.policies {
                bump(r.policies.entry(p.to_string()).or_default().entry(kind).or_default(), candidate, 1);
            }
        }
        let hours = HOURS_KINDS.contains(&d.decision).then(|| d.gpu_hours.unwrap_or(0.0));
        if let Some(h) = hours {
            bump(r.gpu_hours.entry(kind).or_default(), candidate, h);
        }
        if let Some(p) = &d.project {
            let pd = r.projects.entry(p.to_string()).or_default();
            bump(pd.decisions.entry(kind).or_default(), candidate, 1);
            if let Some(h) = hours {
                bump(pd.gpu_hours.entry(kind).or_default(), candidate, h);
            }
        }
    }
}

fn shadow(r: &mut ReplayReport, side: &str, ds: &[Decision]) {
    for d in ds.iter().filter(|d| d.dry_run) {
        let differs = !ds.iter().any(|e| !e.dry_run && e.job_id == d.job_id && e.decision == d.decision);
        for p in &d.policies {
            let s = r
                .shadow
                .entry(side.to_owned())
                .or_default()
                .entry(p.to_string())
                .or_default()
                .entry(d.decision.as_str())
                .or_default();
            s.decisions += 1;
            if differs {
                s.differ += 1;
                s.gpu_hours += d.gpu_hours.unwrap_or(0.0);
            }
        }
    }
}

fn signed(v: f64) -> String {
    if v > 0.0 { format!("+{v:.1}") } else { format!("{v:.1}") }
}

impl ReplayReport {
    /// The report for people. Deterministic: same report, same bytes.
    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "replay: {} events ({} duplicate, {} malformed{}); candidate `{}` against {}\n",
            self.events,
            self.duplicates,
            self.malformed,
            if self.refused > 0 { format!(", {} refused", self.refused) } else { String::new() },
            self.candidate,
            self.baseline
        ));
        s.push_str(&format!(
            "decisions: {} compared, {} changed ({} different, {} added, {} removed), {} unchanged ({} with a new reason)\n",
            self.compared,
            self.different + self.added + self.removed,
            self.different,
            self.added,
            self.removed,
            self.unchanged,
            self.reworded
        ));
        let table = |s: &mut String, title: &str, rows: Vec<(String, f64, f64)>, decimals: bool| {
            if rows.is_empty() {
                return;
            }
            let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(title.len()).max(36);
            s.push_str(&format!("\n{title:<w$}  {:>10}  {:>10}  {:>10}\n", "baseline", "candidate", "delta"));
            for (name, b, c) in rows {
                if decimals {
                    s.push_str(&format!("{name:<w$}  {b:>10.1}  {c:>10.1}  {:>10}\n", signed(c - b)));
                } else {
                    let d = c as i64 - b as i64;
                    let d = if d > 0 { format!("+{d}") } else { d.to_string() };
                    s.push_str(&format!("{name:<w$}  {b:>10}  {c:>10}  {d:>10}\n"));
                }
            }
        };
        let kinds = |m: &BTreeMap<&'static str, Delta<u64>>| -> Vec<(String, f64, f64)> {
            DecisionKind::ALL
                .iter()
                .filter_map(|k| {
                    m.get(k.as_str()).map(|d| (format!("  {}", k.as_str()), d.baseline as f64, d.candidate as f64))
                })
                .collect()
        };
        table(&mut s, "decisions by kind", kinds(&self.decisions), false);
        table(&mut s, "dry-run decisions by kind", kinds(&self.dry_run_decisions), false);
        let hours_name = |k: &str| match k {
            "deny" => "denied",
            "defer" => "deferred",
            "require_approval" => "held for approval",
            _ => "reclaimed",
        };
        let hours: Vec<(String, f64, f64)> = HOURS_KINDS
            .iter()
            .filter_map(|k| {
                self.gpu_hours
                    .get(k.as_str())
                    .map(|d| (format!("  {}", hours_name(k.as_str())), d.baseline, d.candidate))
            })
            .collect();
        table(&mut s, "GPU-hours", hours, true);
        if !self.admission_changes.is_empty() {
            s.push_str("\nadmission changes\n");
            for (t, (n, h)) in &self.admission_changes {
                s.push_str(&format!("  {t:<30}  {n:>10} job(s) {h:>10.1} GPU-hours\n"));
            }
        }
        let pol: Vec<(String, f64, f64)> = self
            .policies
            .iter()
            .flat_map(|(p, kinds)| {
                kinds
                    .iter()
                    .filter(|(_, d)| d.baseline != d.candidate)
                    .map(move |(k, d)| (format!("  {p}: {k}"), d.baseline as f64, d.candidate as f64))
            })
            .collect();
        table(&mut s, "decisions by policy (changed only)", pol, false);
        let changed_projects: Vec<(&String, &ProjectDelta)> =
            self.projects.iter().filter(|(_, p)| p.changed > 0).collect();
        if !changed_projects.is_empty() {
            s.push_str("\nby project (changed only)\n");
            for (name, p) in changed_projects {
                s.push_str(&format!("  {name}: {} changed decision(s)", p.changed));
                for k in HOURS_KINDS {
                    if let Some(d) = p.gpu_hours.get(k.as_str())
                        && d.baseline != d.candidate
                    {
                        s.push_str(&format!(
                            "; {} {:.1} -> {:.1} GPU-hours",
                            hours_name(k.as_str()),
                            d.baseline,
                            d.candidate
                        ));
                    }
                }
                s.push('\n');
            }
        }
        for (side, policies) in &self.shadow {
            s.push_str(&format!("\nshadow (dry-run) policies, {side}: what they would have done differently\n"));
            for (p, kinds) in policies {
                for (k, sh) in kinds {
                    s.push_str(&format!(
                        "  {p}: {} {k} decision(s), {} differing from the enforced outcome ({:.1} GPU-hours)\n",
                        sh.decisions, sh.differ, sh.gpu_hours
                    ));
                }
            }
        }
        if !self.changes.is_empty() {
            s.push_str(&format!("\nfirst {} changed decision(s)\n", self.changes.len()));
            for c in &self.changes {
                s.push_str(&format!(
                    "  event {} at {}: {}{}{}{}\n",
                    c.event_id,
                    c.time,
                    c.job_id.as_deref().map_or_else(String::new, |j| format!("job {j} ")),
                    c.project.as_deref().map_or_else(String::new, |p| format!("({p}) ")),
                    c.slot,
                    if c.dry_run { " (dry-run)" } else { "" }
                ));
                for (label, side) in [("baseline: ", &c.baseline), ("candidate:", &c.candidate)] {
                    match side {
                        Some(x) => {
                            let ps: Vec<&str> = x.policies.iter().map(|p| &**p).collect();
                            s.push_str(&format!(
                                "    {label} {} [{}]{} {:?}\n",
                                x.decision.as_str(),
                                ps.join(", "),
                                x.gpu_hours.map_or_else(String::new, |h| format!(" {h:.1} GPU-h")),
                                x.reason
                            ));
                        }
                        None => s.push_str(&format!("    {label} (no decision)\n")),
                    }
                }
            }
        }
        s
    }
}

/// Parses `--since` for replay (RFC 3339).
pub fn parse_since(s: &str) -> Result<Timestamp, String> {
    Timestamp::parse(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use bursar_engine::Mode;
    use bursar_model::decode_event;

    use super::*;
    use crate::fixtures;

    fn events() -> Vec<String> {
        let mut out = Vec::new();
        for (i, gpus) in [2, 8, 16, 4, 12].iter().enumerate() {
            let project = if i % 2 == 0 { "nlp" } else { "cv" };
            out.push(format!(
                r#"{{"id":"s{i}","time":"2026-11-02T09:0{i}:00Z","type":"job.submitted","job":{{"id":"j{i}","project":"{project}","user":"u","gpus":{gpus},"requested_hours":2.0}}}}"#
            ));
        }
        // A resent event: counted as a duplicate, never compared twice.
        out.push(out[0].clone());
        out
    }

    fn run(mut r: Replayer) -> ReplayReport {
        for line in events() {
            let e = decode_event(&line).unwrap();
            r.event(&e, Some(&line), &[]);
        }
        r.finish()
    }

    #[test]
    fn a_tightened_cap_reports_the_extra_denials_and_their_gpu_hours() {
        let old = fixtures::set(&[("cap/gpus", 16, Mode::Enforce)]);
        let new = fixtures::set(&[("cap/gpus", 8, Mode::Enforce)]);
        let r = run(Replayer::against_policies(new, old, EngineConfig::default()).with_labels("new", "`old`"));
        assert_eq!((r.events, r.duplicates), (5, 1));
        // j2 (16 GPUs) and j4 (12 GPUs) are newly denied: 32 + 24 GPU-hours.
        assert_eq!(r.decisions["deny"], Delta { baseline: 0, candidate: 2 });
        assert_eq!(r.decisions["allow"], Delta { baseline: 5, candidate: 3 });
        assert_eq!(r.gpu_hours["deny"], Delta { baseline: 0.0, candidate: 56.0 });
        assert_eq!(r.admission_changes["allow -> deny"], (2, 56.0));
        assert_eq!((r.different, r.added, r.removed, r.unchanged), (2, 0, 0, 3));
        assert_eq!(r.projects["nlp"].changed, 2);
        assert_eq!(r.projects["nlp"].gpu_hours["deny"], Delta { baseline: 0.0, candidate: 56.0 });
        assert_eq!(r.changes.len(), 2);
        assert_eq!(r.changes[0].event_id, "s2");
        assert_eq!(r.changes[0].baseline.as_ref().unwrap().decision, DecisionKind::Allow);
        assert!(r.changes[0].candidate.as_ref().unwrap().reason.contains("over the cap of 8"));
        let text = r.render();
        assert!(
            text.contains("\n  allow -> deny                            2 job(s)       56.0 GPU-hours\n"),
            "{text}"
        );
        let row = |a: &str, b: &str, c: &str, d: &str| format!("\n{a:<36}  {b:>10}  {c:>10}  {d:>10}\n");
        assert!(text.contains(&row("  denied", "0.0", "56.0", "+56.0")), "{text}");
        assert!(text.contains(&row("  cap/gpus: deny", "0", "2", "+2")), "{text}");
        assert!(!text.contains("cap/gpus: allow"), "{text}");
    }

    #[test]
    fn the_same_inputs_give_the_same_bytes_and_limit_caps_the_examples() {
        let mk = || {
            Replayer::against_policies(
                fixtures::set(&[("cap/gpus", 4, Mode::Enforce)]),
                fixtures::set(&[("cap/gpus", 16, Mode::Enforce)]),
                EngineConfig::default(),
            )
            .with_limit(1)
        };
        let (a, b) = (run(mk()), run(mk()));
        assert_eq!(a.render(), b.render());
        assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
        assert_eq!(a.changes.len(), 1);
        assert_eq!(a.different, 3);
    }

    #[test]
    fn shadow_policies_report_what_they_would_have_done_differently() {
        let set = fixtures::set(&[("cap/enforced", 16, Mode::Enforce), ("cap/shadow", 8, Mode::DryRun)]);
        let base = fixtures::set(&[("cap/enforced", 16, Mode::Enforce)]);
        let r = run(Replayer::against_policies(set, base, EngineConfig::default()));
        let sh = &r.shadow["candidate"]["cap/shadow"]["deny"];
        assert_eq!((sh.decisions, sh.differ, sh.gpu_hours), (2, 2, 56.0));
        // Shadow decisions change nothing enforced.
        assert_eq!(r.decisions["allow"], Delta { baseline: 5, candidate: 5 });
        assert_eq!(r.dry_run_decisions["deny"], Delta { baseline: 0, candidate: 2 });
        assert_eq!(r.added, 2);
        assert!(
            r.render()
                .contains("  cap/shadow: 2 deny decision(s), 2 differing from the enforced outcome (56.0 GPU-hours)")
        );
    }

    #[test]
    fn recorded_decisions_are_the_baseline_when_replaying_the_audit_log() {
        let line = &events()[2];
        let e = decode_event(line).unwrap();
        let mut engine = Engine::new(Arc::new(PolicySet::empty()));
        let mut recorded = Vec::new();
        engine.process(&e, Some(line), &mut recorded);
        let mut r =
            Replayer::against_recorded(fixtures::set(&[("cap/gpus", 8, Mode::Enforce)]), EngineConfig::default());
        r.event(&e, Some(line), &recorded);
        let rep = r.finish();
        assert_eq!(rep.admission_changes["allow -> deny"], (1, 32.0));
    }
}
