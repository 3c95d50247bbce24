//! Diagnostics a person can act on: `file:line:col: error: message`, the source line with the span
//! underlined, and a `help:` line saying what to do.

use std::fmt;

/// One error in a policy file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Diagnostic {
    /// The file, as given to the loader.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// What is wrong, lowercase, user input in backticks.
    pub message: String,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub help: Option<String>,
    /// The source line, for the underline.
    #[serde(skip)]
    pub source_line: Option<String>,
    /// How many characters to underline.
    #[serde(skip)]
    pub width: usize,
}

impl Diagnostic {
    /// A diagnostic at byte range `span` of `source`.
    pub fn at(file: &str, source: &str, span: std::ops::Range<usize>, message: impl Into<String>) -> Diagnostic {
        let start = span.start.min(source.len());
        let line_start = source[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = source[start..].find('\n').map_or(source.len(), |i| start + i);
        let line = source[..start].matches('\n').count() + 1;
        let column = source[line_start..start].chars().count() + 1;
        let end = span.end.clamp(start, line_end.max(start));
        let width = source[start..end].chars().count().max(1);
        Diagnostic {
            file: file.to_owned(),
            line,
            column,
            message: message.into(),
            help: None,
            source_line: Some(source[line_start..line_end].trim_end_matches('\r').to_owned()),
            width,
        }
    }

    /// A diagnostic about a whole file (it could not be read, say).
    pub fn file(file: &str, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            file: file.to_owned(),
            line: 1,
            column: 1,
            message: message.into(),
            help: None,
            source_line: None,
            width: 0,
        }
    }

    /// The same diagnostic with a help line.
    pub fn with_help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    /// The first line only: `file:line:col: message`.
    pub fn headline(&self) -> String {
        format!("{}:{}:{}: {}", self.file, self.line, self.column, self.message)
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}:{}:{}: error: {}", self.file, self.line, self.column, self.message)?;
        if let Some(src) = &self.source_line {
            let gutter = self.line.to_string().len();
            writeln!(f, "{:gutter$} |", "")?;
            writeln!(f, "{} | {}", self.line, src)?;
            writeln!(f, "{:gutter$} | {}{}", "", " ".repeat(self.column - 1), "^".repeat(self.width))?;
        }
        if let Some(h) = &self.help {
            writeln!(f, "  = help: {h}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_line_column_and_underline() {
        let src = "[[policy]]\nid = \"q\"\nlimt = 5\n";
        let at = src.find("limt").unwrap();
        let d = Diagnostic::at("p.toml", src, at..at + 4, "unknown field `limt`").with_help("did you mean `limit`?");
        assert_eq!(d.headline(), "p.toml:3:1: unknown field `limt`");
        assert_eq!(
            d.to_string(),
            "p.toml:3:1: error: unknown field `limt`\n  |\n3 | limt = 5\n  | ^^^^\n  = help: did you mean `limit`?\n"
        );
    }
}
