//! `bursar import bill`: a cloud bill — a FinOps FOCUS export (CSV, FOCUS 1.0–1.3), or another export
//! read through a [`Mapping`] — as `billing.charge` events (wire format v1.x, `docs/wire-format.md`),
//! one per line, on a writer.
//!
//! # What a line becomes
//!
//! - **Money**: `amount` is `BilledCost` (what the invoice charges); `bill.effective_cost`,
//!   `list_cost` and `contracted_cost` carry the others. Every amount is read as an exact decimal
//!   ([`decimal`]) and written rounded to micro-units, so sums in the report are exact.
//! - **Card-hours** (`gpu_hours`): `ConsumedQuantity` when `ConsumedUnit` is a card-hour unit; × the
//!   GPUs of the line's SKU or resource when it is a resource-hour unit (`Hours`); for the unused
//!   part of a commitment (which has no consumed quantity) `CommitmentDiscountQuantity` in the same
//!   way. Anything else (storage, network, tax) is a money-only line: 0 card-hours.
//! - **Attribution** (`attribution`): a tag naming the job (`job_id`: the job's project is charged,
//!   the tags' project kept as the fallback), else a tag naming the project, else a resource the
//!   mapping dedicates to a project, else `unattributed` — an explicit account no quota limits.
//! - **Corrections** (`ChargeClass` = `Correction`): the line's amounts are differences for the charge
//!   period it names (not the billing period it arrived in); card-hours may be negative.
//! - **Identity**: the event id is a hash of the line's values as read (the FOCUS fields, numbers and
//!   times normalised, tags sorted) and, for the n-th repeat of the same values in one file, `-n`. A
//!   bill imported twice, or an overlapping export, yields the same ids, which the engine ignores
//!   the second time. The mapping's attribution is not part of the identity: re-importing with a
//!   changed mapping changes nothing (rebuild the log to re-attribute).
//!
//! # Errors
//!
//! A line that cannot be read is refused — `bill.csv:17: column 5 (ChargePeriodStart): …` on the
//! error writer — and the rest goes in. Only a missing required column, an unreadable header or an
//! I/O error stops the import. Every event written is checked by the wire-format decoder first, so
//! `eval` and `serve` accept every line this writes.
//!
//! # Memory
//!
//! The CSV is streamed one record at a time into one reused buffer; what grows with the file is the
//! set of line identities already seen (8 bytes a line, in a hash set), for the repeat counter.

pub mod decimal;
pub mod mapping;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io::{Read, Write};

use bursar_model::{
    Attribution, BillLine, BillingCharge, BillingMode, ChargeCategory, Event, EventKind, Timestamp, UseStatus,
};
use xxhash_rust::xxh3::xxh3_128;

use crate::ImportError;
pub use decimal::{Decimal, micros_text};
pub use mapping::Mapping;

/// The FOCUS columns a bill must have.
pub const REQUIRED: [&str; 4] = ["ChargePeriodStart", "ChargePeriodEnd", "ChargeCategory", "BilledCost"];

/// Lines between two progress notes.
pub const PROGRESS_EVERY: u64 = 100_000;

/// What an import of a bill did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BillReport {
    /// The file, as named in messages.
    pub source: String,
    /// Lines read (records after the header).
    pub lines: u64,
    /// Charges written.
    pub charges: u64,
    /// Lines refused.
    pub refused: u64,
    /// Lines and billed micro-units by attribution (`job`, `tag`, `resource`, `unattributed`).
    pub by_attribution: BTreeMap<&'static str, (u64, i64)>,
    /// Lines with card-hours, and their GPU-milliseconds.
    pub gpu_lines: u64,
    /// Card-hours in GPU-milliseconds.
    pub gpu_ms: i64,
    /// Lines for the unused part of a commitment or capacity reservation, and their GPU-ms.
    pub unused_lines: u64,
    /// Their GPU-milliseconds.
    pub unused_gpu_ms: i64,
    /// Corrections of a previously invoiced period.
    pub corrections: u64,
    /// Lines whose values repeat an earlier line of the file exactly (kept, with `-n` ids).
    pub repeats: u64,
    /// Billed micro-units by currency.
    pub billed: BTreeMap<String, i64>,
}

impl fmt::Display for BillReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "import bill {}: {} lines, {} charges written, {} refused",
            self.source, self.lines, self.charges, self.refused
        )?;
        let h = |ms: i64| ms as f64 / 3_600_000.0;
        writeln!(
            f,
            "  card-hours: {:.3} on {} lines, of which {:.3} reserved and unused ({} lines); {} corrections; {} repeated lines",
            h(self.gpu_ms),
            self.gpu_lines,
            h(self.unused_gpu_ms),
            self.unused_lines,
            self.corrections,
            self.repeats
        )?;
        for (cur, m) in &self.billed {
            writeln!(f, "  billed: {} {}", micros_text(*m), if cur.is_empty() { "(no currency)" } else { cur })?;
        }
        for (how, (n, m)) in &self.by_attribution {
            writeln!(f, "  attributed by {how}: {n} lines, {} billed", micros_text(*m))?;
        }
        Ok(())
    }
}

/// Where each FOCUS column (and tag column) is in the header.
struct Columns {
    index: HashMap<&'static str, usize>,
    tag_columns: Vec<(String, usize)>,
    names: Vec<String>,
}

fn find(header: &[String], name: &str) -> Option<usize> {
    header.iter().position(|h| h.eq_ignore_ascii_case(name))
}

impl Columns {
    fn new(header: &[String], mapping: &Mapping, source: &str) -> Result<Columns, ImportError> {
        let mut index = HashMap::new();
        for focus in mapping::FOCUS_COLUMNS {
            if let Some(i) = find(header, mapping.column(focus)) {
                index.insert(focus, i);
            }
        }
        let missing: Vec<String> = REQUIRED
            .iter()
            .filter(|c| !index.contains_key(*c))
            .map(|c| {
                let name = mapping.column(c);
                if name == *c { format!("`{c}`") } else { format!("`{c}` (mapped to `{name}`)") }
            })
            .collect();
        if !missing.is_empty() {
            return Err(ImportError::Format(format!(
                "{source}:1: the bill has no column {}; its header has: {}\n  help: a FOCUS export has them; for another export, name its columns in a mapping file (`--mapping FILE`, docs/importers.md)",
                missing.join(", "),
                header.join(", ")
            )));
        }
        let mut tag_columns = Vec::new();
        for (tag, col) in &mapping.tag_columns {
            match find(header, col) {
                Some(i) => tag_columns.push((tag.clone(), i)),
                None => {
                    return Err(ImportError::Format(format!(
                        "{source}:1: the mapping's `[tag_columns] {tag} = \"{col}\"` names no column of the bill"
                    )));
                }
            }
        }
        Ok(Columns { index, tag_columns, names: header.to_vec() })
    }
}

/// Why one line is refused: the column (0-based) and the message.
struct Refusal {
    column: Option<usize>,
    message: String,
}

fn refuse(column: usize, message: impl Into<String>) -> Refusal {
    Refusal { column: Some(column), message: message.into() }
}

/// One record being read.
struct Line<'a> {
    record: &'a csv::ByteRecord,
    cols: &'a Columns,
}

impl<'a> Line<'a> {
    /// The text of FOCUS column `focus`, `None` when the column is absent, empty or `null`.
    fn get(&self, focus: &str) -> Result<Option<(&'a str, usize)>, Refusal> {
        let Some(&i) = self.cols.index.get(focus) else { return Ok(None) };
        self.at(i)
    }

    fn at(&self, i: usize) -> Result<Option<(&'a str, usize)>, Refusal> {
        let Some(raw) = self.record.get(i) else { return Ok(None) };
        let s = std::str::from_utf8(raw).map_err(|_| refuse(i, "is not UTF-8 text"))?.trim();
        if s.is_empty() || s.eq_ignore_ascii_case("null") {
            return Ok(None);
        }
        Ok(Some((s, i)))
    }

    fn text(&self, focus: &str) -> Result<Option<String>, Refusal> {
        Ok(self.get(focus)?.map(|(s, _)| s.to_owned()))
    }

    fn time(&self, focus: &str) -> Result<Option<Timestamp>, Refusal> {
        let Some((s, i)) = self.get(focus)? else { return Ok(None) };
        parse_time(s).map(Some).ok_or_else(|| {
            refuse(
                i,
                format!("`{s}` is not a time (write `2026-11-01T00:00:00Z`, `2026-11-01 00:00:00` or `2026-11-01`)"),
            )
        })
    }

    fn decimal(&self, focus: &str) -> Result<Option<Decimal>, Refusal> {
        let Some((s, i)) = self.get(focus)? else { return Ok(None) };
        Decimal::parse(s)
            .map(Some)
            .ok_or_else(|| refuse(i, format!("`{s}` is not a number (FOCUS numeric format: `-100.2`, `4`, `35.2E-7`)")))
    }

    fn money(&self, focus: &str) -> Result<Option<i64>, Refusal> {
        let Some(d) = self.decimal(focus)? else { return Ok(None) };
        let i = self.cols.index.get(focus).copied().unwrap_or(0);
        let v = d.scaled(1_000_000, 0).filter(|m| (*m as f64 / 1e6).abs() <= bursar_model::limits::CHARGE_AMOUNT);
        v.map(Some).ok_or_else(|| refuse(i, "is beyond the amounts bursar accepts (±10¹⁵)"))
    }
}

/// `2026-11-01T00:00:00Z` (any RFC 3339 offset), `2026-11-01 00:00:00` or `2026-11-01T00:00:00` (UTC), or
/// `2026-11-01` (midnight UTC).
pub fn parse_time(s: &str) -> Option<Timestamp> {
    let s = s.trim();
    if s.len() == 10 {
        return Timestamp::parse(&format!("{s}T00:00:00Z")).ok();
    }
    if let Ok(t) = Timestamp::parse(s) {
        return Some(t);
    }
    let s = s.replacen(' ', "T", 1);
    Timestamp::parse(&s).ok().or_else(|| Timestamp::parse(&format!("{s}Z")).ok())
}

/// A reader that notes where its line ends are, so a record's byte offset gives its line. (csv's own
/// record position may point at the `\n` of the previous CRLF, or at blank lines it skips before the
/// record; FOCUS exports are often CRLF and the spec's examples have blank lines.) It keeps only the
/// `\r` and `\n` not yet passed, which csv's read-ahead bounds.
struct Lines<R> {
    inner: R,
    read: u64,
    ends: std::collections::VecDeque<(u64, u8)>,
    passed: u64,
}

impl<R: Read> Read for Lines<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        for (i, b) in buf.get(..n).unwrap_or(&[]).iter().enumerate() {
            if *b == b'\n' || *b == b'\r' {
                self.ends.push_back((self.read + i as u64, *b));
            }
        }
        self.read += n as u64;
        Ok(n)
    }
}

impl<R> Lines<R> {
    /// The 1-based line of the first byte at or after `offset` that does not end a line (offsets
    /// only grow).
    fn line_of(&mut self, offset: u64) -> u64 {
        let mut at = offset;
        while let Some(&(pos, b)) = self.ends.front() {
            if pos > at {
                break;
            }
            if pos == at {
                at += 1;
            }
            if b == b'\n' {
                self.passed += 1;
            }
            self.ends.pop_front();
        }
        self.passed + 1
    }
}

/// Writes one charge per line of `input` to `out`; refused lines and progress notes go to `notes`.
/// `total_bytes` (the file's size, when known) turns the progress notes into percentages.
pub fn import(
    input: impl Read,
    source: &str,
    mapping: &Mapping,
    total_bytes: Option<u64>,
    out: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<BillReport, ImportError> {
    let lines = Lines { inner: input, read: 0, ends: std::collections::VecDeque::new(), passed: 0 };
    let mut rdr = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(lines);
    let mut record = csv::ByteRecord::new();
    let mut report = BillReport { source: source.to_owned(), ..BillReport::default() };
    let header = loop {
        match rdr.read_byte_record(&mut record) {
            Ok(true) => {}
            Ok(false) => return Err(ImportError::Format(format!("{source}: the bill is empty (no header line)"))),
            Err(e) => return Err(ImportError::Format(format!("{source}:1: cannot read the header: {e}"))),
        }
        let h: Vec<String> = record
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let t = String::from_utf8_lossy(f);
                let t = if i == 0 { t.trim_start_matches('\u{feff}').to_owned() } else { t.into_owned() };
                t.trim().to_owned()
            })
            .collect();
        if h.iter().any(|c| !c.is_empty()) {
            break h;
        }
    };
    let cols = Columns::new(&header, mapping, source)?;
    let mut seen: HashSet<u64> = HashSet::new();
    let mut repeats: HashMap<u64, u32> = HashMap::new();
    loop {
        let start = rdr.position().byte();
        match rdr.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                // A malformed record (an unterminated quote runs to the end of the file): csv reports
                // where; nothing after it can be read as records.
                report.lines += 1;
                report.refused += 1;
                let at = rdr.get_mut().line_of(e.position().map_or(start, csv::Position::byte));
                writeln!(notes, "{source}:{at}: {e}; the line is refused")
                    .map_err(|e| ImportError::io("cannot write to stderr", e))?;
                if matches!(e.kind(), csv::ErrorKind::Io(_)) {
                    return Err(ImportError::Format(format!("{source}: cannot read: {e}")));
                }
                continue;
            }
        }
        let line_no = rdr.get_mut().line_of(record.position().map_or(start, csv::Position::byte));
        if record.iter().all(|f| f.iter().all(u8::is_ascii_whitespace)) {
            continue; // a blank line (the FOCUS example files have them)
        }
        report.lines += 1;
        if report.lines.is_multiple_of(PROGRESS_EVERY) {
            let done = record.position().map_or(0, csv::Position::byte);
            let pct = total_bytes.filter(|t| *t > 0).map_or(String::new(), |t| format!(" ({}%)", done * 100 / t));
            writeln!(notes, "import bill {source}: {} lines{pct}", report.lines)
                .map_err(|e| ImportError::io("cannot write to stderr", e))?;
        }
        let line = Line { record: &record, cols: &cols };
        let charge = if record.len() != header.len() {
            Err(Refusal {
                column: None,
                message: format!("has {} fields where the header has {}", record.len(), header.len()),
            })
        } else {
            read_line(&line, mapping)
        };
        match charge {
            Ok(c) => {
                let h = xxh3_128(c.identity.as_bytes());
                let low = h as u64;
                let n = if seen.insert(low) {
                    0
                } else {
                    let n = repeats.entry(low).or_insert(0);
                    *n += 1;
                    report.repeats += 1;
                    *n
                };
                let id = if n == 0 { format!("bill-{h:032x}") } else { format!("bill-{h:032x}-{n}") };
                let event = Event {
                    id,
                    time: c.line.period_start,
                    kind: EventKind::BillingCharge(c.charge),
                    extra: Vec::new(),
                };
                let text = event.to_json();
                // What `eval` and `serve` would refuse is refused here, with this line's place.
                let checked = bursar_model::decode_event(&text).map_err(|e| e.to_string()).and_then(|e| {
                    bursar_model::names::check(&bursar_model::Input::Event(e)).map_err(|e| e.to_string())
                });
                if let Err(m) = checked {
                    report.refused += 1;
                    writeln!(notes, "{source}:{line_no}: {m}; the line is refused")
                        .map_err(|e| ImportError::io("cannot write to stderr", e))?;
                    continue;
                }
                out.write_all(text.as_bytes())
                    .and_then(|()| out.write_all(b"\n"))
                    .map_err(|e| ImportError::io("cannot write events", e))?;
                report.charges += 1;
                let e = report.by_attribution.entry(c.attribution.as_str()).or_insert((0, 0));
                e.0 += 1;
                e.1 += c.billed;
                *report.billed.entry(c.currency.unwrap_or_default()).or_insert(0) += c.billed;
                if c.gpu_ms != 0 {
                    report.gpu_lines += 1;
                    report.gpu_ms += c.gpu_ms;
                    if c.unused {
                        report.unused_lines += 1;
                        report.unused_gpu_ms += c.gpu_ms;
                    }
                }
                if c.correction {
                    report.corrections += 1;
                }
            }
            Err(r) => {
                report.refused += 1;
                let at = match r.column {
                    Some(i) => format!(" column {} ({}):", i + 1, cols.names.get(i).map_or("?", String::as_str)),
                    None => String::new(),
                };
                writeln!(notes, "{source}:{line_no}:{at} {}; the line is refused", r.message)
                    .map_err(|e| ImportError::io("cannot write to stderr", e))?;
            }
        }
    }
    Ok(report)
}

/// One line read.
struct Read1 {
    charge: BillingCharge,
    line: BillLine,
    identity: String,
    attribution: Attribution,
    currency: Option<String>,
    billed: i64,
    gpu_ms: i64,
    unused: bool,
    correction: bool,
}

fn read_line(l: &Line<'_>, mapping: &Mapping) -> Result<Read1, Refusal> {
    let mut identity = String::with_capacity(256);
    let start = l.time("ChargePeriodStart")?;
    let end = l.time("ChargePeriodEnd")?;
    let col = |c: &str| l.cols.index.get(c).copied().unwrap_or(0);
    let (Some(start), Some(end)) = (start, end) else {
        let c = if start.is_none() { "ChargePeriodStart" } else { "ChargePeriodEnd" };
        return Err(refuse(col(c), "is empty: every line needs its charge period"));
    };
    if end <= start {
        return Err(refuse(col("ChargePeriodEnd"), "is not after ChargePeriodStart"));
    }
    let (cat_text, cat_col) =
        l.get("ChargeCategory")?.ok_or_else(|| refuse(col("ChargeCategory"), "is empty: every line has a category"))?;
    let category = mapping.category(cat_text).ok_or_else(|| {
        refuse(cat_col, format!("`{cat_text}` is not a charge category (Usage, Purchase, Tax, Credit, Adjustment, or one the mapping's [categories] names)"))
    })?;
    let correction = match l.get("ChargeClass")? {
        None => false,
        Some((s, _)) if s.eq_ignore_ascii_case("correction") => true,
        Some((s, i)) => {
            return Err(refuse(i, format!("`{s}` is not a charge class (FOCUS allows only `Correction`, or empty)")));
        }
    };
    let billed =
        l.money("BilledCost")?.ok_or_else(|| refuse(col("BilledCost"), "is empty: every line has a billed cost"))?;
    let effective = l.money("EffectiveCost")?;
    let list = l.money("ListCost")?;
    let contracted = l.money("ContractedCost")?;
    let status = |c: &str| -> Result<Option<UseStatus>, Refusal> {
        match l.get(c)? {
            None => Ok(None),
            Some((s, i)) => UseStatus::parse(s)
                .map(Some)
                .ok_or_else(|| refuse(i, format!("`{s}` is not a status (Used or Unused)"))),
        }
    };
    let commitment = match l.text("CommitmentDiscountId")? {
        Some(id) => Some(bursar_model::bill::Commitment { id, status: status("CommitmentDiscountStatus")? }),
        None => None,
    };
    let reservation = match l.text("CapacityReservationId")? {
        Some(id) => Some(bursar_model::bill::Commitment { id, status: status("CapacityReservationStatus")? }),
        None => None,
    };
    let resource = l.text("ResourceId")?;
    let sku = match l.text("SkuId")? {
        Some(s) => Some(s),
        None => l.text("SkuPriceId")?,
    };
    let region = l.text("RegionId")?;
    let currency = l.text("BillingCurrency")?.or_else(|| mapping.currency.clone());

    // Tags: the JSON object of the Tags column, then the mapping's tag columns.
    let mut tags: BTreeMap<String, String> = BTreeMap::new();
    if let Some((s, i)) = l.get("Tags")? {
        let v: BTreeMap<String, serde_json::Value> =
            serde_json::from_str(s).map_err(|e| refuse(i, format!("is not a JSON object of tags ({e})")))?;
        for (k, v) in v {
            let v = match v {
                serde_json::Value::String(s) => s,
                serde_json::Value::Null => continue,
                serde_json::Value::Bool(_) | serde_json::Value::Number(_) => v.to_string(),
                _ => return Err(refuse(i, format!("tag `{k}` is an object or array (FOCUS tag values are scalars)"))),
            };
            tags.insert(k, v);
        }
    }
    for (tag, i) in &l.cols.tag_columns {
        if let Some((s, _)) = l.at(*i)? {
            tags.insert(tag.clone(), s.to_owned());
        }
    }
    if tags.len() > bursar_model::bill::MAX_TAGS {
        return Err(refuse(
            col("Tags"),
            format!("has {} tags, more than the {} bursar keeps", tags.len(), bursar_model::bill::MAX_TAGS),
        ));
    }
    let tag = |keys: &[String]| keys.iter().find_map(|k| tags.get(k).filter(|v| !v.is_empty()).cloned());
    let job = tag(&mapping.tags.job);
    let tag_project = tag(&mapping.tags.project);
    let resource_map = resource.as_ref().and_then(|r| mapping.resources.get(r));
    let sku_map = sku.as_ref().and_then(|s| mapping.skus.get(s));
    let gpu_type = resource_map
        .and_then(|g| g.gpu_type.clone())
        .or_else(|| sku_map.and_then(|g| g.gpu_type.clone()))
        .or_else(|| tag(&mapping.tags.gpu_type));
    let gpus = resource_map.and_then(|g| g.gpus).or_else(|| sku_map.and_then(|g| g.gpus));

    // Card-hours.
    let unused = [&commitment, &reservation].into_iter().flatten().any(|c| c.status == Some(UseStatus::Unused));
    let quantity = match (l.decimal("ConsumedQuantity")?, l.text("ConsumedUnit")?) {
        (Some(q), Some(u)) => Some((q, u, col("ConsumedQuantity"))),
        _ if unused => match (l.decimal("CommitmentDiscountQuantity")?, l.text("CommitmentDiscountUnit")?) {
            (Some(q), Some(u)) => Some((q, u, col("CommitmentDiscountQuantity"))),
            _ => None,
        },
        _ => None,
    };
    let gpu_ms = match quantity {
        Some((q, u, i)) if mapping.is_card_hours(&u) => {
            q.scaled(3_600_000, 0).ok_or_else(|| refuse(i, "is too large"))?
        }
        Some((q, u, i)) if mapping.is_resource_hours(&u) => match gpus {
            Some(g) => q.scaled(3_600_000 * i128::from(g), 0).ok_or_else(|| refuse(i, "is too large"))?,
            None => 0,
        },
        _ => 0,
    };
    if gpu_ms < 0 && !correction {
        return Err(refuse(col("ConsumedQuantity"), "is negative on a line that is not a correction"));
    }

    // Attribution.
    let (attribution, project) = if job.is_some() {
        (Attribution::Job, tag_project)
    } else if tag_project.is_some() {
        (Attribution::Tag, tag_project)
    } else if let Some(p) = resource_map.and_then(|g| g.project.clone()) {
        (Attribution::Resource, Some(p))
    } else {
        (Attribution::Unattributed, None)
    };
    let mut line_tags = tags.clone();
    for (key, keys) in [("user", &mapping.tags.user), ("team", &mapping.tags.team)] {
        if let Some(v) = tag(keys) {
            line_tags.insert(key.to_owned(), v);
        }
    }

    // Identity: the values as read, normalised; never the mapping's attribution or GPU counts.
    let mut push = |name: &str, v: &str| {
        identity.push_str(name);
        identity.push('=');
        identity.push_str(v);
        identity.push('\u{1f}');
    };
    for focus in mapping::FOCUS_COLUMNS {
        let Some((s, _)) = l.get(focus)? else { continue };
        let norm = match focus {
            "BillingPeriodStart" | "ChargePeriodStart" | "ChargePeriodEnd" => {
                parse_time(s).map_or_else(|| s.to_owned(), |t| t.0.to_string())
            }
            "Tags" => serde_json::to_string(&tags).unwrap_or_default(),
            _ => match Decimal::parse(s) {
                Some(d) if focus.ends_with("Cost") || focus.ends_with("Quantity") => d.normalised(),
                _ => s.to_owned(),
            },
        };
        push(focus, &norm);
    }
    for (tag, i) in &l.cols.tag_columns {
        if let Some((s, _)) = l.at(*i)? {
            push(&format!("tag:{tag}"), s);
        }
    }

    let money = |m: i64| m as f64 / 1e6;
    let line = BillLine {
        period_start: start,
        period_end: end,
        billing_period: l.time("BillingPeriodStart")?,
        category,
        correction,
        resource,
        sku,
        region,
        gpu_type,
        gpus,
        effective_cost: effective.map(money),
        list_cost: list.map(money),
        contracted_cost: contracted.map(money),
        commitment,
        capacity_reservation: reservation,
        tags: line_tags,
    };
    let mode = if line.commitment.is_some() || line.capacity_reservation.is_some() {
        Some(BillingMode::Reserved)
    } else if category == ChargeCategory::Usage && gpu_ms != 0 {
        Some(BillingMode::OnDemand)
    } else {
        None
    };
    let charge = BillingCharge {
        project: if attribution == Attribution::Unattributed { None } else { project },
        job_id: job,
        gpu_hours: gpu_ms as f64 / 3_600_000.0,
        amount: Some(money(billed)),
        currency: currency.clone(),
        mode,
        attribution: Some(attribution),
        bill: Some(Box::new(line.clone())),
    };
    Ok(Read1 { charge, line, identity, attribution, currency, billed, gpu_ms, unused, correction })
}

#[cfg(test)]
mod tests;
