//! A typed walk over the spanned TOML tree that collects errors instead of stopping at the first.
//!
//! Policy files are read by hand rather than through `serde` derive so that every field keeps its byte
//! span (a "must be positive" error points at the value, not at the file), unknown fields get an
//! "expected one of …" list and a did-you-mean, and one file can report all of its mistakes at once.

use std::borrow::Cow;
use std::ops::Range;

use bursar_model::Duration;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::diag::Diagnostic;

/// Collects diagnostics for one file.
#[derive(Debug)]
pub struct Reader<'s> {
    /// File name for diagnostics.
    pub file: &'s str,
    /// The text.
    pub source: &'s str,
    /// Errors so far.
    pub errors: Vec<Diagnostic>,
}

/// The TOML type name of a value, for messages.
pub fn type_name(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date-time",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// Edit distance, for did-you-mean suggestions.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The closest of `options` to `word`, if it is close enough to be a typo.
pub fn did_you_mean<'a>(word: &str, options: &[&'a str]) -> Option<&'a str> {
    options
        .iter()
        .map(|o| (distance(word, o), *o))
        .filter(|(d, o)| *d <= 2.max(o.len() / 3))
        .min_by_key(|(d, _)| *d)
        .map(|(_, o)| o)
}

/// One of a list of choices, for messages: "`a`, `b` or `c`".
pub fn one_of(options: &[&str]) -> String {
    let quoted: Vec<String> = options.iter().map(|o| format!("`{o}`")).collect();
    match quoted.len() {
        0 => String::new(),
        1 => quoted[0].clone(),
        n => format!("{} or {}", quoted[..n - 1].join(", "), quoted[n - 1]),
    }
}

impl<'s> Reader<'s> {
    /// A reader for `source`, reported as `file`.
    pub fn new(file: &'s str, source: &'s str) -> Reader<'s> {
        Reader { file, source, errors: Vec::new() }
    }

    /// Records an error at `span`.
    pub fn error(&mut self, span: Range<usize>, message: impl Into<String>) {
        self.errors.push(Diagnostic::at(self.file, self.source, span, message));
    }

    /// Records an error with a help line.
    pub fn error_help(&mut self, span: Range<usize>, message: impl Into<String>, help: impl Into<String>) {
        self.errors.push(Diagnostic::at(self.file, self.source, span, message).with_help(help));
    }

    /// A diagnostic at `span` without recording it.
    pub fn diagnostic(&self, span: Range<usize>, message: impl Into<String>) -> Diagnostic {
        Diagnostic::at(self.file, self.source, span, message)
    }
}

/// The fields of one table, tracking which were read so the rest can be reported as unknown.
pub struct Fields<'t, 'i> {
    table: &'t DeTable<'i>,
    /// Span of the whole table (its header, for `[[policy]]`).
    pub span: Range<usize>,
    /// Human name of the table, e.g. "policy `quota/x`".
    pub what: String,
    used: Vec<&'t str>,
}

impl<'t, 'i> Fields<'t, 'i> {
    /// Wraps a table.
    pub fn new(table: &'t DeTable<'i>, span: Range<usize>, what: impl Into<String>) -> Fields<'t, 'i> {
        Fields { table, span, what: what.into(), used: Vec::new() }
    }

    /// The value of `key`, marking it read.
    pub fn get(&mut self, key: &str) -> Option<&'t Spanned<DeValue<'i>>> {
        let (k, v) = self.table.get_key_value(key)?;
        let name: &'t Cow<'i, str> = k.get_ref();
        self.used.push(name.as_ref());
        Some(v)
    }

    /// True when the table has `key` (without marking it read).
    pub fn has(&self, key: &str) -> bool {
        self.table.contains_key(key)
    }

    /// A string field.
    pub fn str(&mut self, r: &mut Reader<'_>, key: &str) -> Option<(String, Range<usize>)> {
        let v = self.get(key)?;
        match v.get_ref() {
            DeValue::String(s) => Some((s.to_string(), v.span())),
            other => {
                r.error(v.span(), format!("`{key}` must be a string, found {}", type_name(other)));
                None
            }
        }
    }

    /// A required string field.
    pub fn req_str(&mut self, r: &mut Reader<'_>, key: &str, help: &str) -> Option<(String, Range<usize>)> {
        if !self.has(key) {
            r.error_help(self.span.clone(), format!("{} is missing `{key}`", self.what), help);
            return None;
        }
        self.str(r, key)
    }

    /// A number field (integer or float).
    pub fn num(&mut self, r: &mut Reader<'_>, key: &str) -> Option<(f64, Range<usize>)> {
        let v = self.get(key)?;
        let n = match v.get_ref() {
            DeValue::Integer(i) => i64::from_str_radix(&i.as_str().replace('_', ""), i.radix()).ok().map(|x| x as f64),
            DeValue::Float(f) => f.as_str().replace('_', "").parse::<f64>().ok(),
            other => {
                r.error(v.span(), format!("`{key}` must be a number, found {}", type_name(other)));
                return None;
            }
        };
        match n {
            Some(n) if n.is_finite() => Some((n, v.span())),
            _ => {
                r.error(v.span(), format!("`{key}` must be a finite number"));
                None
            }
        }
    }

    /// A number that must be greater than zero.
    pub fn positive(&mut self, r: &mut Reader<'_>, key: &str) -> Option<f64> {
        let (n, span) = self.num(r, key)?;
        if n <= 0.0 {
            r.error_help(
                span,
                format!("`{key}` must be greater than 0, found {n}"),
                "remove the field to have no limit",
            );
            return None;
        }
        Some(n)
    }

    /// A fraction from 0 to 1.
    pub fn fraction(&mut self, r: &mut Reader<'_>, key: &str) -> Option<f64> {
        let (n, span) = self.num(r, key)?;
        if !(0.0..=1.0).contains(&n) {
            let help = if (1.0..=100.0).contains(&n) {
                format!("write it as a fraction: {} for {n}%", n / 100.0)
            } else {
                "utilisation is a fraction: 0.05 means 5%".to_owned()
            };
            r.error_help(span, format!("`{key}` must be between 0 and 1, found {n}"), help);
            return None;
        }
        Some(n)
    }

    /// A non-negative whole number that fits in u32.
    pub fn count(&mut self, r: &mut Reader<'_>, key: &str) -> Option<u32> {
        let (n, span) = self.num(r, key)?;
        if n < 0.0 || n.fract() != 0.0 || n > f64::from(u32::MAX) {
            r.error(span, format!("`{key}` must be a whole number of at least 0, found {n}"));
            return None;
        }
        Some(n as u32)
    }

    /// A GPU count: a whole number (`8`), or a share of GPUs exact to a MIG slice as a string
    /// (`"2/7"`) or a number (`1.5`).
    pub fn gpus(&mut self, r: &mut Reader<'_>, key: &str) -> Option<bursar_model::Gpus> {
        let v = self.get(key)?;
        let span = v.span();
        gpus_value(r, v.get_ref(), span, &format!("`{key}`"))
    }

    /// A boolean field.
    pub fn bool(&mut self, r: &mut Reader<'_>, key: &str) -> Option<bool> {
        let v = self.get(key)?;
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                r.error(v.span(), format!("`{key}` must be `true` or `false`, found {}", type_name(other)));
                None
            }
        }
    }

    /// A duration written as a string (`"30m"`).
    pub fn duration(&mut self, r: &mut Reader<'_>, key: &str) -> Option<Duration> {
        let (s, span) = self.str(r, key)?;
        match Duration::parse(&s) {
            Ok(d) if d.millis() > 0 => Some(d),
            Ok(_) => {
                r.error(span, format!("`{key}` must be longer than zero"));
                None
            }
            Err(e) => {
                r.error_help(
                    span,
                    e.to_string(),
                    "units: `ms`, `s`, `m`, `h`, `d`, `w`; e.g. `\"90m\"` or `\"1h30m\"`",
                );
                None
            }
        }
    }

    /// One of a fixed set of keywords.
    pub fn keyword<'o>(&mut self, r: &mut Reader<'_>, key: &str, options: &[&'o str]) -> Option<&'o str> {
        let (s, span) = self.str(r, key)?;
        if let Some(o) = options.iter().find(|o| **o == s) {
            return Some(o);
        }
        let mut d = r.diagnostic(span, format!("`{key}` must be {}, found `{s}`", one_of(options)));
        if let Some(m) = did_you_mean(&s, options) {
            d = d.with_help(format!("did you mean `{m}`?"));
        }
        r.errors.push(d);
        None
    }

    /// A list of strings (a single string is accepted as a list of one).
    pub fn str_list(&mut self, r: &mut Reader<'_>, key: &str) -> Option<Vec<(String, Range<usize>)>> {
        let v = self.get(key)?;
        match v.get_ref() {
            DeValue::String(s) => Some(vec![(s.to_string(), v.span())]),
            DeValue::Array(items) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items.iter() {
                    match item.get_ref() {
                        DeValue::String(s) => out.push((s.to_string(), item.span())),
                        other => r.error(item.span(), format!("`{key}` must hold strings, found {}", type_name(other))),
                    }
                }
                Some(out)
            }
            other => {
                r.error(v.span(), format!("`{key}` must be a list of strings, found {}", type_name(other)));
                None
            }
        }
    }

    /// A sub-table.
    pub fn table(&mut self, r: &mut Reader<'_>, key: &str) -> Option<Fields<'t, 'i>> {
        let v = self.get(key)?;
        match v.get_ref() {
            DeValue::Table(t) => Some(Fields::new(t, v.span(), format!("`{key}`"))),
            other => {
                r.error(v.span(), format!("`{key}` must be a table, found {}", type_name(other)));
                None
            }
        }
    }

    /// An array of tables.
    pub fn tables(&mut self, r: &mut Reader<'_>, key: &str) -> Vec<Fields<'t, 'i>> {
        let Some(v) = self.get(key) else { return Vec::new() };
        match v.get_ref() {
            DeValue::Array(items) => items
                .iter()
                .filter_map(|item| match item.get_ref() {
                    DeValue::Table(t) => Some(Fields::new(t, item.span(), format!("`{key}` entry"))),
                    other => {
                        r.error(item.span(), format!("`{key}` must hold tables, found {}", type_name(other)));
                        None
                    }
                })
                .collect(),
            other => {
                r.error(v.span(), format!("`{key}` must be an array of tables, found {}", type_name(other)));
                Vec::new()
            }
        }
    }

    /// Every entry of the table, marking all read.
    pub fn entries(&mut self) -> Vec<(&'t str, Range<usize>, &'t Spanned<DeValue<'i>>)> {
        let mut out = Vec::new();
        for (k, v) in self.table.iter() {
            let name: &'t str = k.get_ref().as_ref();
            self.used.push(name);
            out.push((name, k.span(), v));
        }
        out
    }

    /// Reports every field that was not read, with the list of known fields and a did-you-mean.
    pub fn finish(self, r: &mut Reader<'_>, known: &[&str]) {
        for (k, _) in self.table.iter() {
            let name: &str = k.get_ref().as_ref();
            if self.used.contains(&name) {
                continue;
            }
            let mut d = r.diagnostic(
                k.span(),
                format!("unknown field `{name}` in {}, expected one of {}", self.what, one_of(known)),
            );
            if let Some(m) = did_you_mean(name, known) {
                d = d.with_help(format!("did you mean `{m}`?"));
            }
            r.errors.push(d);
        }
    }
}

/// A GPU count from a TOML value (see [`Table::gpus`]); `what` names it in an error.
pub fn gpus_value(r: &mut Reader<'_>, v: &DeValue<'_>, span: Range<usize>, what: &str) -> Option<bursar_model::Gpus> {
    let read = match v {
        DeValue::Integer(i) => i64::from_str_radix(&i.as_str().replace('_', ""), i.radix())
            .ok()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n <= bursar_model::limits::GPUS)
            .map(bursar_model::Gpus::whole)
            .ok_or_else(|| format!("{what} must be a whole number of GPUs from 0 to {}", bursar_model::limits::GPUS)),
        DeValue::Float(f) => f
            .as_str()
            .replace('_', "")
            .parse::<f64>()
            .map_err(|e| e.to_string())
            .and_then(|n| bursar_model::Gpus::from_f64(n).map_err(|e| format!("{what}: {e}"))),
        DeValue::String(t) => bursar_model::Gpus::parse(t).map_err(|e| format!("{what}: {e}")),
        other => Err(format!(
            "{what} must be a number of GPUs (`8`, or a share such as \"2/7\"), found {}",
            type_name(other)
        )),
    };
    match read {
        Ok(g) => Some(g),
        Err(e) => {
            r.error(span, e);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions() {
        assert_eq!(did_you_mean("limt", &["limit", "scope", "period"]), Some("limit"));
        assert_eq!(did_you_mean("zzzzzz", &["limit", "scope"]), None);
        assert_eq!(one_of(&["a", "b", "c"]), "`a`, `b` or `c`");
    }
}
