//! Derived data: tables other crates keep in the audit file (the `facts_*` of `bursar-report`) that
//! are not chained because they can be rebuilt from the chained rows. `verify --deep` rebuilds them
//! into a scratch copy and compares; this module holds the two file-level steps it needs.

use std::path::Path;

use rusqlite::Connection;
use serde::Serialize;

use crate::error::{AuditError, Result};

/// Copies the database at `from` into a new file `to` (`VACUUM INTO`: a consistent copy even beside a
/// writer).
pub fn copy_to(from: &Path, to: &Path) -> Result<()> {
    let conn = Connection::open_with_flags(from, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(AuditError::sqlite(format!("open `{}`", from.display())))?;
    let target = to.to_str().ok_or_else(|| AuditError::Invalid(format!("`{}` is not a UTF-8 path", to.display())))?;
    conn.execute("VACUUM INTO ?1", [target]).map_err(AuditError::sqlite(format!(
        "copy `{}` to `{}`",
        from.display(),
        to.display()
    )))?;
    Ok(())
}

/// Whether the database at `path` has a table `name`.
pub fn has_table(path: &Path, name: &str) -> Result<bool> {
    let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(AuditError::sqlite(format!("open `{}`", path.display())))?;
    conn.query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1", [name], |r| {
        r.get::<_, i64>(0)
    })
    .map(|n| n > 0)
    .map_err(AuditError::sqlite("read the table list"))
}

/// How one table differs between two copies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableDiff {
    /// The table.
    pub table: String,
    /// Rows only in the first copy.
    pub only_in_a: u64,
    /// Rows only in the second copy.
    pub only_in_b: u64,
    /// The first such row, as its columns' values (from the first copy if it has one).
    pub example: String,
}

/// Compares `tables` between the databases `a` and `b` row by row (as sets); returns the tables that
/// differ. A table missing from both is equal; missing from one, every row of the other differs.
pub fn compare_tables(a: &Path, b: &Path, tables: &[&str]) -> Result<Vec<TableDiff>> {
    let conn = Connection::open_with_flags(a, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(AuditError::sqlite(format!("open `{}`", a.display())))?;
    let b_path = b.to_str().ok_or_else(|| AuditError::Invalid(format!("`{}` is not a UTF-8 path", b.display())))?;
    conn.execute("ATTACH DATABASE ?1 AS other", [b_path]).map_err(AuditError::sqlite("attach the rebuilt copy"))?;
    let mut out = Vec::new();
    for t in tables {
        let exists = |schema: &str| -> Result<bool> {
            conn.query_row(
                &format!("SELECT count(*) FROM {schema}.sqlite_master WHERE type = 'table' AND name = ?1"),
                [t],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n > 0)
            .map_err(AuditError::sqlite("read the table list"))
        };
        let (in_a, in_b) = (exists("main")?, exists("other")?);
        if !in_a && !in_b {
            continue;
        }
        let count = |sql: &str| -> Result<u64> {
            conn.query_row(sql, [], |r| r.get::<_, i64>(0))
                .map(|n| u64::try_from(n).unwrap_or(0))
                .map_err(AuditError::sqlite(format!("compare `{t}`")))
        };
        let (only_a, only_b, example_sql) = match (in_a, in_b) {
            (true, true) => (
                count(&format!("SELECT count(*) FROM (SELECT * FROM main.{t} EXCEPT SELECT * FROM other.{t})"))?,
                count(&format!("SELECT count(*) FROM (SELECT * FROM other.{t} EXCEPT SELECT * FROM main.{t})"))?,
                format!(
                    "SELECT * FROM (SELECT * FROM main.{t} EXCEPT SELECT * FROM other.{t}) \
                     UNION ALL SELECT * FROM (SELECT * FROM other.{t} EXCEPT SELECT * FROM main.{t}) LIMIT 1"
                ),
            ),
            (true, false) => {
                (count(&format!("SELECT count(*) FROM main.{t}"))?, 0, format!("SELECT * FROM main.{t} LIMIT 1"))
            }
            _ => (0, count(&format!("SELECT count(*) FROM other.{t}"))?, format!("SELECT * FROM other.{t} LIMIT 1")),
        };
        if only_a == 0 && only_b == 0 {
            continue;
        }
        let mut st = conn.prepare(&example_sql).map_err(AuditError::sqlite(format!("compare `{t}`")))?;
        let names: Vec<String> = st.column_names().map(str::to_owned).collect();
        let example = st
            .query_row([], |r| {
                let mut parts = Vec::new();
                for (i, n) in names.iter().enumerate() {
                    let v = match r.get_ref(i)? {
                        rusqlite::types::ValueRef::Null => "NULL".to_owned(),
                        rusqlite::types::ValueRef::Integer(x) => x.to_string(),
                        rusqlite::types::ValueRef::Real(x) => x.to_string(),
                        rusqlite::types::ValueRef::Text(x) => format!("{:?}", String::from_utf8_lossy(x)),
                        rusqlite::types::ValueRef::Blob(x) => format!("<{} bytes>", x.len()),
                    };
                    parts.push(format!("{n}={v}"));
                }
                Ok(parts.join(" "))
            })
            .unwrap_or_default();
        out.push(TableDiff { table: (*t).to_owned(), only_in_a: only_a, only_in_b: only_b, example });
    }
    Ok(out)
}
