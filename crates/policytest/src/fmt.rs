//! `bursar fmt`: a formatter for TOML policy files that never loses a comment.
//!
//! It edits the file's syntax tree with `toml_edit`, which keeps every comment and blank line as
//! "decor" attached to the key, value or table it precedes or follows, and rewrites only that decor and
//! the order of keys:
//!
//! - in each `[[policy]]` table the keys `id`, `description`, `kind`, `mode` come first, in that order
//!   (a stable sort: other keys keep their order, and a comment written above a key moves with it);
//! - `key = value` with single spaces, no indentation; a trailing comment keeps the spaces before it
//!   (so aligned comments stay aligned);
//! - at most one blank line between keys, exactly one before each table header, none at the end;
//! - an array without comments on one line if that fits in 100 columns, else one element per line.
//!
//! String values are never touched, multi-line strings included. Before a result is returned it is
//! checked: it must parse to the same TOML values as the input and carry the same comments (as a
//! multiset, since a comment moves with its key); a formatter bug is reported as an error instead of
//! being written to disk.

use toml_edit::{Array, ArrayOfTables, Decor, DocumentMut, Item, Key, RawString, Table, Value};

/// Why a file could not be formatted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FmtError {
    /// The file is not valid TOML.
    #[error("not valid TOML: {0}")]
    Parse(String),
    /// The formatted text would not mean the same thing or would lose a comment: a bug, refused.
    #[error("refusing to format: the result would {0} (please report this as a bug)")]
    Unsafe(&'static str),
}

/// Keys that open a `[[policy]]` table, in this order.
pub const POLICY_HEAD: [&str; 4] = ["id", "description", "kind", "mode"];

const MAX_WIDTH: usize = 100;

/// Formats the text of a policy file.
pub fn format_toml(source: &str) -> Result<String, FmtError> {
    let mut doc: DocumentMut = source.parse().map_err(|e: toml_edit::TomlError| FmtError::Parse(e.to_string()))?;
    format_table(doc.as_table_mut(), &[], true);
    // The first item of the file gets no blank line above it.
    strip_leading_blank(doc.as_table_mut());
    let trailing = doc.trailing().as_str().map(|t| norm_lines(&format!("{t}\n"), Lead::Keep)).unwrap_or_default();
    doc.set_trailing(trailing);
    let mut out = doc.to_string();
    while out.ends_with("\n\n") {
        out.pop();
    }
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    verify(source, &out)?;
    Ok(out)
}

/// What to do with blank lines at the start of a normalised prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lead {
    /// Keep one if there was any (a key separated from the one above by a blank line).
    Keep,
    /// Exactly one (a table header).
    One,
    /// None (the first thing in the file).
    Strip,
}

/// Normalises the whitespace and comments that precede an item: comments lose their indentation and
/// trailing spaces, runs of blank lines become one, the item itself starts at column 1.
///
/// `raw` is a sequence of lines, each ending in a newline, and then the indentation of the item.
fn norm_lines(raw: &str, lead: Lead) -> String {
    let pieces: Vec<&str> = raw.split('\n').collect();
    let body = &pieces[..pieces.len().saturating_sub(1)];
    let mut out = String::new();
    let mut blank = false;
    let mut started = false;
    for line in body {
        let t = line.trim();
        if t.is_empty() {
            blank = true;
            continue;
        }
        let leading = !started;
        if blank && (!leading || lead == Lead::Keep) {
            out.push('\n');
        }
        if leading && lead == Lead::One {
            out.push('\n');
        }
        blank = false;
        started = true;
        out.push_str(t);
        out.push('\n');
    }
    if !started {
        match lead {
            Lead::Keep if blank => out.push('\n'),
            Lead::One => out.push('\n'),
            _ => {}
        }
    } else if blank {
        // A blank line between the last comment and the item: the comment is about what is above.
        out.push('\n');
    }
    out
}

fn norm_prefix(decor: &mut Decor, lead: Lead) {
    let raw = decor.prefix().and_then(RawString::as_str).unwrap_or("").to_owned();
    decor.set_prefix(norm_lines(&raw, lead));
}

/// A trailing comment keeps the spaces before it (people align them); anything else after a value or
/// a table header goes.
fn norm_suffix(decor: &mut Decor) {
    let raw = decor.suffix().and_then(RawString::as_str).unwrap_or("").to_owned();
    let t = raw.trim_end();
    decor.set_suffix(match t.find('#') {
        Some(i) => format!("{}{}", if i == 0 { " " } else { &t[..i] }, &t[i..]),
        None => String::new(),
    });
}

fn has_comment(s: &str) -> bool {
    s.contains('#')
}

fn format_value(v: &mut Value) {
    norm_prefix_value(v);
    match v {
        Value::Array(a) => format_array(a),
        Value::InlineTable(t) if !has_comment(&t.to_string()) => t.fmt(),
        _ => {}
    }
}

fn norm_prefix_value(v: &mut Value) {
    let d = v.decor_mut();
    d.set_prefix(" ");
    norm_suffix(d);
}

fn format_array(a: &mut Array) {
    let mut probe = a.clone();
    probe.decor_mut().clear();
    if has_comment(&probe.to_string()) {
        return;
    }
    a.fmt();
    for v in a.iter_mut() {
        if let Value::Array(inner) = v {
            format_array(inner);
        }
    }
    let mut one_line = a.clone();
    one_line.decor_mut().clear();
    if one_line.to_string().len() > MAX_WIDTH - 20 && a.len() > 1 {
        for v in a.iter_mut() {
            v.decor_mut().set_prefix("\n    ");
            v.decor_mut().set_suffix("");
        }
        a.set_trailing_comma(true);
        a.set_trailing("\n");
    }
}

fn rank(path: &[&str], key: &str) -> usize {
    if path == ["policy"] { POLICY_HEAD.iter().position(|k| *k == key).unwrap_or(POLICY_HEAD.len()) } else { 0 }
}

fn format_table(t: &mut Table, path: &[&str], root: bool) {
    if !root {
        norm_prefix(t.decor_mut(), Lead::One);
        norm_suffix(t.decor_mut());
    }
    if path == ["policy"] {
        t.sort_values_by(|k1: &Key, _: &Item, k2: &Key, _: &Item| rank(path, k1.get()).cmp(&rank(path, k2.get())));
    }
    let keys: Vec<String> = t.iter().map(|(k, _)| k.to_owned()).collect();
    for k in keys {
        let mut child_path: Vec<&str> = path.to_vec();
        child_path.push(&k);
        let is_value = t.get(&k).is_some_and(Item::is_value);
        if let Some(mut key) = t.key_mut(&k) {
            if is_value {
                norm_prefix(key.leaf_decor_mut(), Lead::Keep);
                key.leaf_decor_mut().set_suffix(" ");
            } else {
                // A table's key is written inside its header's brackets: `[policy.select]`.
                key.leaf_decor_mut().set_prefix("");
                key.leaf_decor_mut().set_suffix("");
            }
        }
        match t.get_mut(&k) {
            Some(Item::Value(v)) => format_value(v),
            Some(Item::Table(sub)) => format_table(sub, &child_path, false),
            Some(Item::ArrayOfTables(arr)) => format_array_of_tables(arr, &child_path),
            _ => {}
        }
    }
}

fn format_array_of_tables(arr: &mut ArrayOfTables, path: &[&str]) {
    for t in arr.iter_mut() {
        format_table(t, path, false);
    }
}

/// Removes the blank line above the first thing in the file (a key or a table header).
fn strip_leading_blank(root: &mut Table) {
    let first_key = root.iter().find(|(_, v)| v.is_value()).map(|(k, _)| k.to_owned());
    if let Some(k) = first_key
        && let Some(mut key) = root.key_mut(&k)
    {
        let p = key.leaf_decor().prefix().and_then(RawString::as_str).unwrap_or("").to_owned();
        key.leaf_decor_mut().set_prefix(norm_lines(&p, Lead::Strip));
        return;
    }
    // No top-level values: the first table header (in document order) opens the file.
    let mut first: Option<(isize, String, Option<usize>)> = None;
    for (k, v) in root.iter() {
        let candidates: Vec<(isize, Option<usize>)> = match v {
            Item::Table(t) => t.position().map(|p| (p, None)).into_iter().collect(),
            Item::ArrayOfTables(a) => {
                a.iter().enumerate().filter_map(|(i, t)| t.position().map(|p| (p, Some(i)))).collect()
            }
            _ => Vec::new(),
        };
        for (p, i) in candidates {
            if first.as_ref().is_none_or(|f| p < f.0) {
                first = Some((p, k.to_owned(), i));
            }
        }
    }
    let Some((_, k, i)) = first else { return };
    let table = match (root.get_mut(&k), i) {
        (Some(Item::Table(t)), None) => Some(t),
        (Some(Item::ArrayOfTables(a)), Some(i)) => a.get_mut(i),
        _ => None,
    };
    if let Some(t) = table {
        let p = t.decor().prefix().and_then(RawString::as_str).unwrap_or("").to_owned();
        t.decor_mut().set_prefix(norm_lines(&p, Lead::Strip));
    }
}

/// Every comment in a TOML text, sorted (a multiset), found by walking the lexical structure.
fn comments(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_str: Option<&str> = None;
    let mut rest = source;
    while !rest.is_empty() {
        if let Some(delim) = in_str {
            if (delim == "\"" || delim == "\"\"\"")
                && let Some(r) = rest.strip_prefix('\\')
            {
                // Skip the escaped character.
                let mut chars = r.chars();
                chars.next();
                rest = chars.as_str();
                continue;
            }
            if rest.starts_with(delim) {
                rest = &rest[delim.len()..];
                in_str = None;
                continue;
            }
        } else {
            for delim in ["\"\"\"", "'''", "\"", "'"] {
                if rest.starts_with(delim) {
                    in_str = Some(delim);
                    break;
                }
            }
            if let Some(d) = in_str {
                rest = &rest[d.len()..];
                continue;
            }
            if rest.starts_with('#') {
                let end = rest.find('\n').unwrap_or(rest.len());
                out.push(rest[..end].trim_end().to_owned());
                rest = &rest[end..];
                continue;
            }
        }
        let mut chars = rest.chars();
        chars.next();
        rest = chars.as_str();
    }
    out.sort();
    out
}

fn verify(before: &str, after: &str) -> Result<(), FmtError> {
    let a: toml::Table = toml::from_str(before).map_err(|e| FmtError::Parse(e.to_string()))?;
    let b: toml::Table = toml::from_str(after).map_err(|_| FmtError::Unsafe("not parse"))?;
    if a != b {
        return Err(FmtError::Unsafe("change the values"));
    }
    if comments(before) != comments(after) {
        return Err(FmtError::Unsafe("lose or change a comment"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MESSY: &str = r#"# Quotas for the NLP team.
# Reviewed monthly.


[[policy]]
kind   =   "quota"     # the family
   # the id must be unique
id="quota/nlp-monthly"
description = "NLP gets 10,000 GPU-hours a month"



projects = [ "nlp",
  "nlp-eval" ]
limit = 10000
reason = """
multi-line   text # not a comment
   stays as written"""
[[policy]]
id = "reclaim/idle"
# a comment inside the array
windows = [
  "30m", # short
  "2h",
]
  [policy.select]
    queues=["short"]
# trailing comment


"#;

    const EXPECTED: &str = r#"# Quotas for the NLP team.
# Reviewed monthly.

[[policy]]
# the id must be unique
id = "quota/nlp-monthly"
description = "NLP gets 10,000 GPU-hours a month"
kind = "quota"     # the family

projects = ["nlp", "nlp-eval"]
limit = 10000
reason = """
multi-line   text # not a comment
   stays as written"""

[[policy]]
id = "reclaim/idle"
# a comment inside the array
windows = [
  "30m", # short
  "2h",
]

[policy.select]
queues = ["short"]
# trailing comment
"#;

    pub(super) const MESSY_FOR_ROBUSTNESS: &str = MESSY;

    #[test]
    fn formats_a_messy_file_keeping_every_comment() {
        let out = format_toml(MESSY).unwrap();
        assert_eq!(out, EXPECTED, "got:\n{out}");
    }

    #[test]
    fn formatting_is_idempotent() {
        let once = format_toml(MESSY).unwrap();
        assert_eq!(format_toml(&once).unwrap(), once);
        assert_eq!(format_toml(EXPECTED).unwrap(), EXPECTED);
    }

    #[test]
    fn long_arrays_go_one_element_per_line() {
        let src = format!(
            "[[policy]]\nid = \"x\"\nusers = [{}]\n",
            (0..20).map(|i| format!("\"user{i}\"")).collect::<Vec<_>>().join(", ")
        );
        let out = format_toml(&src).unwrap();
        assert!(out.contains("users = [\n    \"user0\",\n    \"user1\","), "{out}");
        assert!(out.contains("    \"user19\",\n]\n"), "{out}");
        assert_eq!(format_toml(&out).unwrap(), out);
    }

    #[test]
    fn invalid_toml_is_an_error() {
        assert!(matches!(format_toml("a = "), Err(FmtError::Parse(_))));
    }

    #[test]
    fn comment_scanner_ignores_hashes_in_strings() {
        assert_eq!(
            comments("a = \"#x\" # real\nb = '''\n# no\n''' # yes\nc = \"\\\"#\" #z\n"),
            vec!["# real".to_owned(), "# yes".to_owned(), "#z".to_owned()]
        );
    }

    #[test]
    fn verify_catches_lost_comments_and_changed_values() {
        assert_eq!(verify("a = 1 # c\n", "a = 1\n"), Err(FmtError::Unsafe("lose or change a comment")));
        assert_eq!(verify("a = 1\n", "a = 2\n"), Err(FmtError::Unsafe("change the values")));
    }
}

#[cfg(test)]
mod robustness {
    //! A poor man's fuzzer that runs in `cargo test` (the real one is `fuzz/fuzz_targets/fmt_toml.rs`):
    //! prefixes of the example policy files cut every 37 characters, and each file with a comment, a
    //! blank line or a key spliced in at every line boundary, must format or be refused without panicking, and
    //! formatting must be a fixed point.
    use super::*;

    fn check(text: &str) {
        if let Ok(once) = format_toml(text) {
            assert_eq!(format_toml(&once).as_deref(), Ok(once.as_str()), "not idempotent for:\n{text}\n---\n{once}");
        }
    }

    #[test]
    fn prefixes_and_splices_of_the_example_policies() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies");
        let mut sources = vec![super::tests::MESSY_FOR_ROBUSTNESS.to_owned()];
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                sources.push(std::fs::read_to_string(&path).unwrap());
            }
        }
        for src in &sources {
            // Every 37th character: a prefix cut anywhere (mid-key, mid-string, mid-comment).
            for (i, _) in src.char_indices().step_by(37) {
                check(&src[..i]);
            }
            let lines: Vec<&str> = src.split_inclusive('\n').collect();
            let splices = ["# spliced\n", "\n\n", "   # indented\n", "x = 1 # new\n"];
            for i in 0..=lines.len() {
                let mut s: String = lines[..i].concat();
                s.push_str(splices[i % splices.len()]);
                s.push_str(&lines[i..].concat());
                check(&s);
            }
        }
    }
}
