//! Decoding a framed line into an [`Input`], under the rules of where it came from.
//!
//! One function decides what every entry point accepts ([`decode`]), so `eval`, `replay`, `test`,
//! serve's HTTP and socket front ends and serve's own recovery cannot disagree again:
//!
//! | origin | v1 events | action records | `bursar.tick` | ids `bursar-tick-…` | `run.recorded`, `ledger.op` |
//! |---|---|---|---|---|---|
//! | [`Origin::Producer`] (files, stdin, HTTP, socket, agents) | yes | yes | refused | refused | refused |
//! | [`Origin::Cluster`] (a partition's events stream and owner in `serve --cluster`) | yes | yes | refused | refused | yes |
//! | [`Origin::Journal`] (bursar's own audit log) | yes | yes | yes | yes | yes |
//!
//! A partition's events stream holds what the front ends published, each line already decoded under
//! the producer's rules, and the run facts other partitions' owners wrote: so it is the producer's
//! rules plus `run.recorded`, which no producer can forge (a front end refuses it).
//!
//! The journal origin also reads what older versions of bursar wrote: a `clock.tick` whose id starts
//! with `bursar-tick-` was serve's wall tick, and a `clock.tick` carrying an `enforcement` object was a
//! Slurm enforcement record. They decode as [`Input::WallTick`] and [`Input::Action`], so replaying an
//! old log gives what serve did, not what a producer's tick would have done.

use std::sync::Arc;

use bursar_model::api::Rejected;
use bursar_model::{
    Action, ActionOutcome, Event, EventKind, Input, LEDGER_TYPE, RUN_TYPE, Sender, WALL_TICK_PREFIX, WALL_TICK_TYPE,
    WallTick, decode_input,
};

use crate::frame::Frame;

/// Where a line came from, which decides what it may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A producer: a file or stdin (`eval`, `replay --events`, `test`), serve's HTTP and socket, an agent.
    Producer,
    /// bursar's own journal (serve's recovery, `replay --audit`).
    Journal,
    /// A partition's events stream (`serve --cluster`): producers' events and other partitions' run facts.
    Cluster,
}

/// A decoded line: the input and its text as received.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded<'a> {
    /// 1-based line number.
    pub line: u64,
    /// The text (UTF-8, without the newline).
    pub text: &'a str,
    /// The input.
    pub input: Input,
}

/// What a framed line turned out to be.
#[derive(Debug, Clone, PartialEq)]
pub enum Line<'a> {
    /// An input to apply.
    Input(Decoded<'a>),
    /// A blank line: ignored, but it was counted.
    Blank,
    /// Not an input the origin may send.
    Rejected(Rejected),
}

fn reject(line: u64, error: impl Into<String>) -> Line<'static> {
    Line::Rejected(Rejected { source: None, line, error: error.into() })
}

/// Decodes one framed line from `origin`.
pub fn decode(frame: Frame<'_>, origin: Origin) -> Line<'_> {
    let (line, bytes) = match frame {
        Frame::Line { line, bytes } => (line, bytes),
        Frame::TooLong { line, len, max } => {
            return reject(line, format!("line of {len} bytes is longer than the limit of {max} bytes; skipped"));
        }
    };
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => return reject(line, format!("line is not valid UTF-8 (byte {})", e.valid_up_to() + 1)),
    };
    if text.trim().is_empty() {
        return Line::Blank;
    }
    let input = match decode_input(text) {
        Ok(i) => i,
        Err(e) => return reject(line, e.to_string()),
    };
    match admit(input, origin) {
        Ok(input) => Line::Input(Decoded { line, text, input }),
        Err(error) => reject(line, error),
    }
}

/// A decoded line that owns its text: what a front end that decodes on its own thread (serve's HTTP
/// handlers and socket readers) hands to the thread that owns the session.
#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    /// 1-based line number in its body or connection.
    pub line: u64,
    /// The line as received (or, once [`Incoming::namespace`]d, as bursar keeps it).
    pub raw: String,
    /// The input.
    pub input: Input,
    /// Who sent it and how they proved it (`serve`, once the request is authenticated); the journal
    /// keeps it beside the input.
    pub sender: Option<Arc<Sender>>,
}

/// The separator between a sender's namespace and its own id in the ids bursar keeps
/// ([`Incoming::namespace`]; `bursar_auth::ID_SEPARATOR`).
pub const NAMESPACE_SEPARATOR: char = ':';

impl Incoming {
    /// An input without a sender.
    pub fn new(line: u64, raw: String, input: Input) -> Incoming {
        Incoming { line, raw, input, sender: None }
    }

    /// Puts the input's id in its sender's namespace (`<principal>:<id>`, `~<person>:<id>`:
    /// `bursar_auth::Caller::id_namespace`), and its line as bursar keeps it is then the canonical
    /// line of the renamed input. So two senders never share an id: a producer, or a person, that
    /// posts another's predictable id first (`lab-17-finished`) makes nothing a duplicate but its
    /// own. The engine, the audit log and every decision see the kept id.
    pub fn namespace(&mut self, namespace: &str) {
        let kept = namespaced(namespace, &self.input.id());
        match &mut self.input {
            Input::Event(e) => e.id = kept,
            Input::Action(a) => a.id = kept,
            Input::Inventory(i) => i.id = kept,
            Input::WallTick(_) | Input::Run(_) | Input::Ledger(_) => return,
        }
        self.raw = self.input.to_json();
    }
}

/// `<namespace>:<id>`: the id bursar keeps for id `id` of the sender whose namespace is `namespace`.
pub fn namespaced(principal: &str, id: &str) -> String {
    let mut kept = String::with_capacity(principal.len() + 1 + id.len());
    kept.push_str(principal);
    kept.push(NAMESPACE_SEPARATOR);
    kept.push_str(id);
    kept
}

/// Frames and decodes a whole body (an HTTP request) under `origin`'s rules: every input with its
/// line number, and every rejected line with its reason. Blank lines are skipped. Each line is
/// decoded on its own, so one bad line (not JSON, not UTF-8, too long) never costs its neighbours.
pub fn decode_body(body: &[u8], max_line: usize, origin: Origin) -> (Vec<Incoming>, Vec<Rejected>) {
    let mut ok = Vec::new();
    let mut rejected = Vec::new();
    crate::frame::Framer::body(body, max_line, |frame| match decode(frame, origin) {
        Line::Input(d) => ok.push(Incoming::new(d.line, d.text.to_owned(), d.input)),
        Line::Rejected(r) => rejected.push(r),
        Line::Blank => {}
    });
    (ok, rejected)
}

/// Applies the origin's rules to a decoded input.
pub fn admit(input: Input, origin: Origin) -> Result<Input, String> {
    if origin != Origin::Journal {
        if let Err(e) = bursar_model::names::check(&input) {
            return Err(e.message);
        }
        if let Input::Event(e) = &input
            && e.kind == EventKind::ClockTick
            && e.extra.iter().any(|(k, _)| k == "enforcement")
        {
            // Older versions journaled Slurm enforcement records in this shape, and bursar reads its
            // journal's old lines as such: from a producer it would move the clock live and be read
            // back as an action record after a restart.
            return Err(
                "a `clock.tick` with an `enforcement` field is how older versions of bursar recorded an action; send `action.executed` or `action.failed`".to_owned(),
            );
        }
    }
    match (origin, input) {
        (Origin::Producer, Input::Run(_)) => Err(format!(
            "`{RUN_TYPE}` is written by bursar's cluster partitions and cannot be sent; send the run's `job.finished`"
        )),
        (Origin::Producer, Input::Ledger(_)) => {
            Err(format!("`{LEDGER_TYPE}` is written by bursar's cluster partitions and cannot be sent"))
        }
        (Origin::Producer | Origin::Cluster, Input::WallTick(_)) => Err(format!(
            "`{WALL_TICK_TYPE}` is bursar's own wall clock and cannot be sent; send `clock.tick` to move event time"
        )),
        (Origin::Producer | Origin::Cluster, Input::Event(e)) if e.id.starts_with(WALL_TICK_PREFIX) => {
            Err(format!("event ids starting with `{WALL_TICK_PREFIX}` are reserved for bursar's own clock"))
        }
        (Origin::Producer | Origin::Cluster, Input::Action(a)) if a.id.starts_with(WALL_TICK_PREFIX) => {
            Err(format!("event ids starting with `{WALL_TICK_PREFIX}` are reserved for bursar's own clock"))
        }
        (Origin::Journal, Input::Event(e)) => Ok(legacy(e)),
        (_, input) => Ok(input),
    }
}

/// What older versions of bursar journaled as `clock.tick`s, read as what they were.
fn legacy(e: Event) -> Input {
    if e.kind != EventKind::ClockTick {
        return Input::Event(e);
    }
    if e.id.starts_with(WALL_TICK_PREFIX) {
        return Input::WallTick(WallTick { time: e.time });
    }
    let Some(pos) = e.extra.iter().position(|(k, _)| k == "enforcement") else { return Input::Event(e) };
    #[derive(serde::Deserialize)]
    struct Record {
        decision_id: String,
        decision_seq: Option<u64>,
        action: String,
        outcome: String,
        detail: Option<String>,
        attempts: Option<u32>,
    }
    let Ok(r) = serde_json::from_str::<Record>(e.extra[pos].1.get()) else { return Input::Event(e) };
    let mut extra = e.extra;
    extra.remove(pos);
    let job_id = extra
        .iter()
        .position(|(k, _)| k == "job_id")
        .and_then(|i| serde_json::from_str::<String>(extra.remove(i).1.get()).ok());
    let (outcome, action) = match r.outcome.as_str() {
        "failed" => (ActionOutcome::Failed, r.action),
        "skipped" => (ActionOutcome::Executed, "none".to_owned()),
        _ => (ActionOutcome::Executed, r.action),
    };
    Input::Action(Action {
        id: e.id,
        time: e.time,
        outcome,
        decision_id: r.decision_id,
        decision_seq: r.decision_seq,
        job_id,
        action,
        detail: r.detail,
        attempts: r.attempts,
        extra,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str, origin: Origin) -> Line<'_> {
        decode(Frame::Line { line: 7, bytes: text.as_bytes() }, origin)
    }

    #[test]
    fn producers_cannot_speak_for_bursars_clock() {
        let wall = r#"{"id":"bursar-tick-5","time":"2026-11-02T09:00:00Z","type":"bursar.tick"}"#;
        let reserved = r#"{"id":"bursar-tick-5","time":"2026-11-02T09:00:00Z","type":"clock.tick"}"#;
        for (text, want) in [(wall, "cannot be sent"), (reserved, "reserved for bursar's own clock")] {
            let Line::Rejected(r) = one(text, Origin::Producer) else { panic!("{text} accepted") };
            assert_eq!(r.line, 7);
            assert!(r.error.contains(want), "{}", r.error);
        }
        assert!(matches!(one(wall, Origin::Journal), Line::Input(Decoded { input: Input::WallTick(_), .. })));
    }

    #[test]
    fn only_bursar_writes_run_facts() {
        let fact = r#"{"id":"run-e9@p2","time":"2026-11-02T09:00:00Z","type":"run.recorded","config":"00000000deadbeef","gpus":8,"status":"succeeded"}"#;
        let Line::Rejected(r) = one(fact, Origin::Producer) else { panic!("a producer's run fact was accepted") };
        assert!(r.error.contains("cannot be sent"), "{}", r.error);
        for origin in [Origin::Cluster, Origin::Journal] {
            let Line::Input(Decoded { input: Input::Run(f), text, .. }) = one(fact, origin) else {
                panic!("not read as a run fact from {origin:?}")
            };
            assert_eq!((f.config, f.gpus, f.status), (0xdead_beef, 8.into(), bursar_model::FinishStatus::Succeeded));
            // What bursar writes reads back as the same line.
            assert_eq!(Input::Run(f).to_json(), text);
        }
        // The stream's other rules are the producer's.
        let wall = r#"{"id":"bursar-tick-5","time":"2026-11-02T09:00:00Z","type":"bursar.tick"}"#;
        assert!(matches!(one(wall, Origin::Cluster), Line::Rejected(_)));
        let bad = r#"{"id":"run-1","time":"2026-11-02T09:00:00Z","type":"run.recorded","config":"xyz","gpus":8,"status":"succeeded"}"#;
        let Line::Rejected(r) = one(bad, Origin::Journal) else { panic!("a bad config hash was accepted") };
        assert!(r.error.contains("16 hexadecimal digits"), "{}", r.error);
    }

    #[test]
    fn old_journals_read_as_what_serve_did() {
        let tick = r#"{"id":"bursar-tick-5","time":"2026-11-02T09:00:00Z","type":"clock.tick"}"#;
        assert!(matches!(one(tick, Origin::Journal), Line::Input(Decoded { input: Input::WallTick(_), .. })));
        let enforcement = r#"{"id":"enforce-d-9","time":"2026-11-02T09:00:00Z","type":"clock.tick","job_id":"lab-1","slurm_job_id":"17","enforcement":{"decision_id":"d-9","decision_seq":42,"decision":"reclaim","action":"scancel","outcome":"done","detail":"cancelled","attempts":1}}"#;
        let Line::Input(Decoded { input: Input::Action(a), .. }) = one(enforcement, Origin::Journal) else {
            panic!("not read as an action")
        };
        assert_eq!((a.decision_id.as_str(), a.job_id.as_deref(), a.action.as_str()), ("d-9", Some("lab-1"), "scancel"));
        assert_eq!(a.extra.len(), 1, "slurm_job_id stays: {:?}", a.extra);
        // From a producer the same line is refused: it would move the clock live and come back as an
        // action record after a restart.
        let Line::Rejected(r) = one(enforcement, Origin::Producer) else {
            panic!("a producer's enforcement tick was accepted")
        };
        assert!(r.error.contains("`enforcement` field"), "{}", r.error);
    }

    #[test]
    fn a_body_keeps_its_good_lines_around_a_bad_one() {
        // Regression: one non-UTF-8 line made serve refuse the whole body.
        let body = b"{\"id\":\"a\",\"time\":\"2026-11-02T09:00:00Z\",\"type\":\"clock.tick\"}\n\xff\n\n{\"id\":\"b\",\"time\":\"2026-11-02T09:00:00Z\",\"type\":\"clock.tick\"}";
        let (ok, bad) = decode_body(body, 1024, Origin::Producer);
        assert_eq!(ok.iter().map(|i| i.line).collect::<Vec<_>>(), [1, 4]);
        assert_eq!(bad.iter().map(|r| r.line).collect::<Vec<_>>(), [2]);
    }

    #[test]
    fn a_producer_body_refuses_reserved_ids_by_line() {
        // Moved from serve's handler tests: a tick under bursar's own id prefix is refused where it stands.
        let body = "{\"id\":\"e1\",\"time\":\"2026-11-02T09:00:00Z\",\"type\":\"clock.tick\"}\n\nnot json\n{\"id\":\"bursar-tick-5\",\"time\":\"2026-11-02T09:00:00Z\",\"type\":\"clock.tick\"}\r\n";
        let (ok, bad) = decode_body(body.as_bytes(), 1024, Origin::Producer);
        assert_eq!(ok.iter().map(|i| i.line).collect::<Vec<_>>(), [1]);
        assert_eq!(bad.iter().map(|r| r.line).collect::<Vec<_>>(), [3, 4]);
        assert!(bad[1].error.contains("reserved"), "{}", bad[1].error);
    }

    #[test]
    fn bad_lines_say_why_with_their_number() {
        let bad = decode(Frame::Line { line: 3, bytes: b"\xff{}" }, Origin::Producer);
        assert_eq!(
            bad,
            Line::Rejected(Rejected { source: None, line: 3, error: "line is not valid UTF-8 (byte 1)".into() })
        );
        assert_eq!(one("   ", Origin::Producer), Line::Blank);
        let Line::Rejected(r) = decode(Frame::TooLong { line: 9, len: 100, max: 10 }, Origin::Producer) else {
            panic!("too long accepted")
        };
        assert!(r.error.contains("longer than the limit of 10 bytes"), "{}", r.error);
    }
}
