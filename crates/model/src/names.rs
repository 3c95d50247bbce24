//! Bounds on the names and texts an input carries: how long they may be and which characters they
//! may hold.
//!
//! Every id, name and label of an event ends up somewhere a person reads it (the pool page, `bursar
//! pending`, `bursar audit explain` in a terminal, a notice in a chat channel) or somewhere it is
//! kept for months (the audit log, the engine's job table). Unbounded, one submission with a 2 MiB
//! project name grows the log by megabytes and the pool page with it; with control characters, a
//! job id can carry a terminal escape or a newline that draws a fake row; with a right-to-left
//! override or a zero-width space, `lab-17` and a look-alike differ where nobody can see it. So a
//! producer's input is checked here before it reaches the engine ([`check`]), and a refused line
//! says which field, why, and what is allowed.
//!
//! The rules: an **id** (event id, job id, the decision an action record names) is at most
//! [`ID_MAX`] bytes of printable characters without spaces; a **name** (project, user, queue, GPU
//! type, stage, tag keys and values, who answered, …) at most [`NAME_MAX`] bytes of printable
//! characters; a **text** (image, dataset, asset fingerprint and URI, script hash, configuration
//! key, a rejection's reason, an action's detail) at most [`TEXT_MAX`] bytes of printable
//! characters. Printable means none of: C0 and C1 control characters (newline, tab, escape, NUL
//! included), DEL, the bidirectional controls (U+061C, U+200E, U+200F, U+202A–U+202E,
//! U+2066–U+2069), the invisible joiners and spaces (U+200B–U+200D, U+2060, U+FEFF) and the rest of
//! Unicode's default-ignorable code points (the soft hyphen U+00AD, U+034F, the Hangul fillers
//! U+115F, U+1160, U+3164 and U+FFA0, variation selectors, tag characters, …).
//!
//! The fields a producer adds that v1 does not define (a keepalive's `note`, a site's `x-rack`) are
//! kept as they came, so they are bounded as a whole: each at most [`TEXT_MAX`] bytes of JSON (its
//! name included), an event's together at most [`EXTRA_MAX`] bytes, a job's tags at most
//! [`TAGS_MAX`]. Before this, a `job.keepalive` with a 4 MiB `note` was journaled as it came, and a
//! person with the `keepalive` power filled the audit log's disk in 13 requests.
//!
//! Bursar's own journal is read without these checks (a log written by an older version is replayed
//! as it was), and the numbers of an event have their own bounds in [`crate::event::limits`].

use crate::event::{EventKind, RawJson};
use crate::input::Input;

/// The longest id, in bytes.
pub const ID_MAX: usize = 256;
/// The longest name, in bytes.
pub const NAME_MAX: usize = 256;
/// The longest text, in bytes; also the most one field v1 does not define may take (its name and
/// its JSON together).
pub const TEXT_MAX: usize = 4096;
/// The most bytes the fields v1 does not define may take in one event, together (at every level:
/// the event, its job, the job's `ready`).
pub const EXTRA_MAX: usize = 16 * 1024;
/// The most tags a job may carry.
pub const TAGS_MAX: usize = 64;

/// Why a field is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct NameError {
    /// The field, as the wire format names it (`job.project`, `id`, `job.tags.team`).
    pub field: String,
    /// The whole sentence, with what is allowed.
    pub message: String,
}

/// What kind of string a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Id,
    Name,
    Text,
}

impl Kind {
    fn max(self) -> usize {
        match self {
            Kind::Id => ID_MAX,
            Kind::Name => NAME_MAX,
            Kind::Text => TEXT_MAX,
        }
    }

    fn what(self) -> &'static str {
        match self {
            Kind::Id => "an id",
            Kind::Name => "a name",
            Kind::Text => "a text",
        }
    }
}

/// The character a person cannot see or that changes what they see, with its name, if `c` is one.
pub fn hidden(c: char) -> Option<&'static str> {
    Some(match c {
        '\n' => "a newline",
        '\r' => "a carriage return",
        '\t' => "a tab",
        '\0' => "a NUL",
        '\u{1b}' => "an escape (ESC)",
        '\u{0}'..='\u{1f}' | '\u{7f}' => "a control character",
        '\u{80}'..='\u{9f}' => "a C1 control character",
        '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
            "a bidirectional control (it reorders what is shown)"
        }
        '\u{200b}'..='\u{200d}' | '\u{2060}' | '\u{feff}' => "an invisible character (zero width)",
        // The rest of Unicode's default-ignorable code points: shown as nothing, so `bob\u{ad}`
        // reads as `bob` (issue 56).
        '\u{ad}' => "a soft hyphen (invisible)",
        '\u{34f}'
        | '\u{115f}'
        | '\u{1160}'
        | '\u{17b4}'
        | '\u{17b5}'
        | '\u{180b}'..='\u{180f}'
        | '\u{2061}'..='\u{2064}'
        | '\u{206a}'..='\u{206f}'
        | '\u{3164}'
        | '\u{ffa0}'
        | '\u{fff0}'..='\u{fff8}'
        | '\u{1bca0}'..='\u{1bca3}'
        | '\u{1d173}'..='\u{1d17a}' => "an invisible character (default-ignorable)",
        '\u{fe00}'..='\u{fe0f}' | '\u{e0100}'..='\u{e01ef}' => "a variation selector (invisible)",
        '\u{e0000}'..='\u{e0fff}' => "a tag character (invisible)",
        _ => return None,
    })
}

fn check_str(field: &str, value: &str, kind: Kind) -> Result<(), NameError> {
    let refuse = |message: String| Err(NameError { field: field.to_owned(), message });
    if value.len() > kind.max() {
        return refuse(format!(
            "`{field}` is {} bytes long, above the {} bytes bursar accepts for {}",
            value.len(),
            kind.max(),
            kind.what()
        ));
    }
    for (i, c) in value.char_indices() {
        if let Some(what) = hidden(c) {
            return refuse(format!(
                "`{field}` holds {what} (U+{:04X}) at byte {}: {} may hold only printable characters",
                u32::from(c),
                i + 1,
                kind.what()
            ));
        }
        if kind == Kind::Id && c.is_whitespace() {
            return refuse(format!(
                "`{field}` holds a space (U+{:04X}) at byte {}: an id may not hold spaces",
                u32::from(c),
                i + 1
            ));
        }
    }
    Ok(())
}

fn opt(field: &str, value: Option<&str>, kind: Kind) -> Result<(), NameError> {
    value.map_or(Ok(()), |v| check_str(field, v, kind))
}

/// A string among an event's extra fields (`reason` of a rejection), when it is one.
fn extra_str(extra: &[(String, RawJson)], key: &str) -> Option<String> {
    extra.iter().find(|(k, _)| k == key).and_then(|(_, v)| serde_json::from_str::<String>(v.get()).ok())
}

/// Checks the fields v1 does not define, at `prefix` (`""` for the event's own, `job.` for the job's),
/// adding their size to `total`.
fn check_extra(prefix: &str, extra: &[(String, RawJson)], total: &mut usize) -> Result<(), NameError> {
    for (k, v) in extra {
        let field = format!("{prefix}{k}");
        let size = k.len() + v.get().len();
        if size > TEXT_MAX {
            return Err(NameError {
                message: format!(
                    "`{field}` is {size} bytes of JSON, above the {TEXT_MAX} bytes bursar keeps for a field it does not define (a note, a label): shorten it, or keep it elsewhere and send a reference"
                ),
                field,
            });
        }
        *total += size;
        if *total > EXTRA_MAX {
            return Err(NameError {
                message: format!(
                    "the fields this event adds to v1 take more than {EXTRA_MAX} bytes together (at `{field}`): bursar keeps at most that much of them per event"
                ),
                field,
            });
        }
    }
    Ok(())
}

/// Checks every id, name and text of `input` against the rules of this module, and the size of the
/// fields v1 does not define.
pub fn check(input: &Input) -> Result<(), NameError> {
    match input {
        Input::Event(e) => {
            check_str("id", &e.id, Kind::Id)?;
            let mut total = 0;
            check_extra("", &e.extra, &mut total)?;
            match &e.kind {
                EventKind::JobSubmitted(j) => {
                    check_extra("job.", &j.extra, &mut total)?;
                    check_extra("job.ready.", &j.ready.extra, &mut total)?;
                    if j.tags.len() > TAGS_MAX {
                        return Err(NameError {
                            field: "job.tags".to_owned(),
                            message: format!(
                                "`job.tags` holds {} tags, above the {TAGS_MAX} bursar accepts for a job",
                                j.tags.len()
                            ),
                        });
                    }
                    check_str("job.id", &j.id, Kind::Id)?;
                    check_str("job.project", &j.project, Kind::Name)?;
                    check_str("job.user", &j.user, Kind::Name)?;
                    opt("job.queue", j.queue.as_deref(), Kind::Name)?;
                    opt("job.gpu_type", j.gpu_type.as_deref(), Kind::Name)?;
                    opt("job.stage", j.stage.as_deref(), Kind::Name)?;
                    opt("job.interconnect", j.interconnect.as_deref(), Kind::Name)?;
                    opt("job.region", j.region.as_deref(), Kind::Name)?;
                    opt("job.image", j.image.as_deref(), Kind::Text)?;
                    opt("job.dataset", j.dataset.as_deref(), Kind::Text)?;
                    opt("job.script_hash", j.script_hash.as_deref(), Kind::Text)?;
                    opt("job.config", j.config.as_deref(), Kind::Text)?;
                    opt("job.replaces", j.replaces.as_deref(), Kind::Id)?;
                    for (k, v) in &j.tags {
                        check_str("job.tags", k, Kind::Name)?;
                        check_str(&format!("job.tags.{k}"), v, Kind::Name)?;
                    }
                }
                EventKind::JobStarted { job_id, info } => {
                    check_str("job_id", job_id, Kind::Id)?;
                    opt("parent", info.parent.as_deref(), Kind::Id)?;
                    opt("released_by", info.released_by.as_deref(), Kind::Name)?;
                }
                EventKind::JobFinished { job_id, .. }
                | EventKind::JobQueued { job_id }
                | EventKind::JobRequeued { job_id } => {
                    check_str("job_id", job_id, Kind::Id)?;
                }
                EventKind::JobSample(s) => {
                    check_str("job_id", &s.job_id, Kind::Id)?;
                    opt("unit", s.unit.as_deref(), Kind::Name)?;
                }
                EventKind::JobKeepalive { job_id, by }
                | EventKind::ApprovalGranted { job_id, by }
                | EventKind::ApprovalRejected { job_id, by } => {
                    check_str("job_id", job_id, Kind::Id)?;
                    opt("by", by.as_deref(), Kind::Name)?;
                    opt("reason", extra_str(&e.extra, "reason").as_deref(), Kind::Text)?;
                }
                EventKind::BillingCharge(c) => {
                    opt("project", c.project.as_deref(), Kind::Name)?;
                    opt("job_id", c.job_id.as_deref(), Kind::Id)?;
                    opt("currency", c.currency.as_deref(), Kind::Name)?;
                    if let Some(b) = &c.bill {
                        opt("bill.resource", b.resource.as_deref(), Kind::Text)?;
                        opt("bill.sku", b.sku.as_deref(), Kind::Text)?;
                        opt("bill.region", b.region.as_deref(), Kind::Name)?;
                        opt("bill.gpu_type", b.gpu_type.as_deref(), Kind::Name)?;
                        for c in [&b.commitment, &b.capacity_reservation].into_iter().flatten() {
                            check_str("bill commitment id", &c.id, Kind::Text)?;
                        }
                        for (k, v) in &b.tags {
                            check_str("bill.tags key", k, Kind::Name)?;
                            check_str("bill.tags value", v, Kind::Text)?;
                        }
                    }
                }
                EventKind::AssetRegistered { project, asset } => {
                    check_str("project", project, Kind::Name)?;
                    check_str("asset.kind", &asset.kind, Kind::Name)?;
                    check_str("asset.fingerprint", &asset.fingerprint, Kind::Text)?;
                    if let Some(r) = &asset.region {
                        check_str("asset.region", r, Kind::Name)?;
                    }
                    check_str("asset.uri", &asset.uri, Kind::Text)?;
                }
                EventKind::ClockTick => {}
            }
            Ok(())
        }
        Input::Action(a) => {
            check_str("id", &a.id, Kind::Id)?;
            check_str("decision_id", &a.decision_id, Kind::Id)?;
            opt("job_id", a.job_id.as_deref(), Kind::Id)?;
            check_str("action", &a.action, Kind::Name)?;
            opt("detail", a.detail.as_deref(), Kind::Text)
        }
        Input::WallTick(_) => Ok(()),
        Input::Run(r) => check_str("id", &r.id, Kind::Id),
        Input::Inventory(i) => {
            check_str("id", &i.id, Kind::Id)?;
            opt("source", i.source.as_deref(), Kind::Name)?;
            for row in &i.capacity {
                check_str("capacity.region", &row.region, Kind::Name)?;
                check_str("capacity.gpu_type", &row.gpu_type, Kind::Name)?;
                if !row.queue.is_empty() {
                    check_str("capacity.queue", &row.queue, Kind::Name)?;
                }
            }
            Ok(())
        }
        // Written by bursar from inputs already checked (its id joins their ids, so it may be longer
        // than one id may be).
        Input::Ledger(_) => Ok(()),
    }
}

/// Checks one name a person or a credential gives (a principal's name, who answers): the rules of
/// a name.
pub fn check_name(field: &str, value: &str) -> Result<(), NameError> {
    if value.is_empty() {
        return Err(NameError { field: field.to_owned(), message: format!("`{field}` must not be empty") });
    }
    check_str(field, value, Kind::Name)
}

/// Checks one text a person gives (a dataset's id in a query): the rules of a text.
pub fn check_text(field: &str, value: &str) -> Result<(), NameError> {
    if value.is_empty() {
        return Err(NameError { field: field.to_owned(), message: format!("`{field}` must not be empty") });
    }
    check_str(field, value, Kind::Text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::decode_input;

    fn refused(line: &str) -> String {
        match check(&decode_input(line).unwrap()) {
            Err(e) => e.message,
            Ok(()) => panic!("accepted: {line}"),
        }
    }

    const SUB: &str = r#"{"id":"e1","time":"2026-11-02T09:00:00Z","type":"job.submitted","job":{"id":"JOB","project":"PROJ","gpus":1,"requested_hours":1,"tags":{"team":"TEAM"}}}"#;

    fn sub(job: &str, project: &str, team: &str) -> String {
        SUB.replace("JOB", job).replace("PROJ", project).replace("TEAM", team)
    }

    #[test]
    fn ordinary_names_pass() {
        assert_eq!(check(&decode_input(&sub("lab-17", "nlp", "search")).unwrap()), Ok(()));
        // Non-ASCII letters are names like any other.
        assert_eq!(check(&decode_input(&sub("作业-1", "Forschung", "équipe")).unwrap()), Ok(()));
    }

    #[test]
    fn look_alikes_escapes_and_fake_rows_are_refused_with_the_field() {
        let m = refused(&sub("lab-17\\u202e", "nlp", "x"));
        assert!(m.contains("`job.id`") && m.contains("bidirectional") && m.contains("U+202E"), "{m}");
        let m = refused(&sub("lab\\u200b-17", "nlp", "x"));
        assert!(m.contains("invisible"), "{m}");
        let m = refused(&sub("j1", "nlp\\u001b[31m", "x"));
        assert!(m.contains("`job.project`") && m.contains("escape"), "{m}");
        let m = refused(&sub("j1", "nlp\\nj2  running", "x"));
        assert!(m.contains("newline"), "{m}");
        let m = refused(&sub("j1", "nlp", "a\\u0000"));
        assert!(m.contains("`job.tags.team`") && m.contains("NUL"), "{m}");
        let m = refused(&sub("j 1", "nlp", "x"));
        assert!(m.contains("may not hold spaces"), "{m}");
    }

    #[test]
    fn default_ignorable_characters_are_refused() {
        // Issue 56: each of these passed, so `bob\u{ad}` showed as `bob`.
        for c in ["\\u00ad", "\\u034f", "\\u3164", "\\ufe0f", "\\udb40\\udc41", "\\u115f", "\\uffa0"] {
            let m = refused(&sub(&format!("bob{c}"), "nlp", "x"));
            assert!(m.contains("`job.id`") && m.contains("invisible"), "{c}: {m}");
            assert!(
                check_name("by", &format!("bob{}", serde_json::from_str::<String>(&format!("\"{c}\"")).unwrap()))
                    .is_err()
            );
        }
    }

    #[test]
    fn lengths_are_bounded() {
        let long = "p".repeat(NAME_MAX + 1);
        let m = refused(&sub("j1", &long, "x"));
        assert!(m.contains("257 bytes long, above the 256 bytes"), "{m}");
        assert_eq!(check(&decode_input(&sub("j1", &"p".repeat(NAME_MAX), "x")).unwrap()), Ok(()));
        let reason = format!(
            r#"{{"id":"r1","time":"2026-11-02T09:00:00Z","type":"approval.rejected","job_id":"j1","by":"bob","reason":"{}"}}"#,
            "x".repeat(TEXT_MAX + 1)
        );
        assert!(refused(&reason).contains("`reason`"));
    }

    #[test]
    fn every_field_a_producer_adds_is_bounded() {
        // Regression (issue 46): a keepalive's 4 MiB `note` was journaled as it came.
        let keepalive = |note: &str| {
            format!(
                r#"{{"id":"k1","time":"2026-11-02T09:00:00Z","type":"job.keepalive","job_id":"j1","by":"alice","note":"{note}"}}"#
            )
        };
        assert_eq!(check(&decode_input(&keepalive("back at five")).unwrap()), Ok(()));
        let m = refused(&keepalive(&"n".repeat(4 * 1024 * 1024)));
        assert!(m.contains("`note` is 4194") && m.contains("above the 4096 bytes"), "{m}");
        // Many fields under the bound each still add up to a bound.
        let many: String = (0..10).map(|i| format!(r#","x{i}":"{}""#, "y".repeat(2000))).collect();
        let line = format!(r#"{{"id":"t1","time":"2026-11-02T09:00:00Z","type":"clock.tick"{many}}}"#);
        assert!(refused(&line).contains("more than 16384 bytes together"));
        // Inside a job and its readiness too.
        let job = sub("j1", "nlp", "x").replace(r#""gpus":1"#, &format!(r#""gpus":1,"note":"{}""#, "z".repeat(5000)));
        assert!(refused(&job).contains("`job.note`"));
        let tags: String = (0..=TAGS_MAX).map(|i| format!(r#""t{i}":"v""#)).collect::<Vec<_>>().join(",");
        let job = sub("j1", "nlp", "x").replace(r#""team":"x""#, &tags);
        assert!(refused(&job).contains("`job.tags` holds 65 tags"));
    }

    #[test]
    fn a_principal_name_is_a_name() {
        assert!(check_name("name", "").is_err());
        assert!(check_name("name", "bob\u{7}").is_err());
        assert_eq!(check_name("name", "slurm-watch"), Ok(()));
    }
}
