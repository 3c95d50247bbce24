//! [`ReportError`]: everything that can stop a report, phrased for the person who asked for it.

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A SQLite statement failed.
    #[error("cannot {context}: {source}")]
    Sqlite {
        /// What was being done.
        context: String,
        /// The error.
        source: rusqlite::Error,
    },
    /// The audit log could not be read.
    #[error(transparent)]
    Audit(#[from] bursar_audit::AuditError),
    /// The price file is not valid.
    #[error(
        "{path}:{line}:{column}: price file: {message}\n  help: see docs/reports.md for the format, or examples/prices.toml"
    )]
    Prices {
        /// The file.
        path: String,
        /// 1-based line of the value (1 when the error is about the whole file).
        line: usize,
        /// 1-based column, in characters.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// A file could not be read.
    #[error("cannot read `{path}`: {source}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// An argument is not valid.
    #[error("{0}")]
    Invalid(String),
}

impl ReportError {
    /// A closure that wraps a SQLite error with what was being done.
    pub fn sqlite(context: impl Into<String>) -> impl FnOnce(rusqlite::Error) -> ReportError {
        let context = context.into();
        move |source| ReportError::Sqlite { context, source }
    }
}

/// The result type of this crate.
pub type Result<T> = std::result::Result<T, ReportError>;
