//! Derived data: tables kept in the audit file that are not hash-chained rows of their own, because
//! they follow from the chained rows: the report facts of `bursar-report` (`facts_*`), the engine's job
//! steps (`lifecycle`) and the look-up tables (`decisions_by_project`, …). [`DERIVED_TABLES`] is the one
//! list of them: `verify --deep` checks every table in it (a missing one is a problem, not a skip),
//! [`crate::verify::prune`] removes the pruned rows' entries from those it names a chain for. A new
//! derived table goes here, or neither `--deep` nor `prune` knows it.
//!
//! The module also holds the two file-level steps `--deep` needs: a consistent copy of the file and a
//! row-by-row comparison of tables between two copies.

use std::path::Path;

use rusqlite::Connection;
use serde::Serialize;

use crate::error::{AuditError, Result};

/// Which crate writes a derived table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Owner {
    /// `bursar-audit`, in the same transaction as the chained rows it follows from.
    Audit,
    /// `bursar-report` (`FactsStore::catch_up`), from the chained rows, on demand.
    Report,
}

/// How `verify` knows a derived table holds what the chained rows say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Check {
    /// Rebuilt from the log in a scratch copy and compared row by row (`verify --deep`).
    Rebuild,
    /// Every commit's anchor records the SHA-256 of the rows it wrote; every `verify` recomputes it.
    /// (The engine's job steps cannot be rebuilt from the log alone: they depend on the policy files,
    /// which the log records by digest only.)
    Anchored,
    /// Compared with the chain it indexes, row by row, by every `verify`.
    Lookup,
}

/// What a prune does to a derived table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Prune {
    /// Its rows of pruned `chain` rows go with them: `column` holds the chain's sequence number.
    With {
        /// `events` or `decisions`.
        chain: &'static str,
        /// The column holding that chain's seq.
        column: &'static str,
    },
    /// Kept: the report facts outlive the rows they came from (a pruned month can still be reported),
    /// and a cursor is one row per chain.
    Kept,
}

/// One derived table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DerivedTable {
    /// The table.
    pub name: &'static str,
    /// Who writes it.
    pub owner: Owner,
    /// Who reads it (for the docs and the messages).
    pub read_by: &'static str,
    /// How it is checked.
    pub check: Check,
    /// What a prune does to it.
    pub prune: Prune,
}

const fn table(name: &'static str, owner: Owner, read_by: &'static str, check: Check, prune: Prune) -> DerivedTable {
    DerivedTable { name, owner, read_by, check, prune }
}

/// Every derived table in an audit file: what a report, the pool page or a restore reads besides the
/// chained rows. `--deep`, `prune` and docs/audit.md read this list.
pub const DERIVED_TABLES: &[DerivedTable] = &[
    table(
        "lifecycle",
        Owner::Audit,
        "the report's accounting",
        Check::Anchored,
        Prune::With { chain: "events", column: "event_seq" },
    ),
    table(
        "decisions_by_project",
        Owner::Audit,
        "`audit query --project`",
        Check::Lookup,
        Prune::With { chain: "decisions", column: "seq" },
    ),
    table(
        "decisions_by_user",
        Owner::Audit,
        "`audit query --user`",
        Check::Lookup,
        Prune::With { chain: "decisions", column: "seq" },
    ),
    table(
        "events_by_job",
        Owner::Audit,
        "`audit explain`, a restart's per-job reload",
        Check::Lookup,
        Prune::With { chain: "events", column: "seq" },
    ),
    table("lookup_cursors", Owner::Audit, "every look-up", Check::Lookup, Prune::Kept),
    table(
        "facts_meta",
        Owner::Report,
        "the report (cursors, facts version, idle threshold)",
        Check::Rebuild,
        Prune::Kept,
    ),
    table("facts_jobs", Owner::Report, "the report, `serve`'s report routes", Check::Rebuild, Prune::Kept),
    table("facts_job_day", Owner::Report, "the report (GPU-hours by day and leak)", Check::Rebuild, Prune::Kept),
    table("facts_usage_hour", Owner::Report, "the report's usage curve", Check::Rebuild, Prune::Kept),
    table("facts_wait_hour", Owner::Report, "the report's queueing (jobs waiting)", Check::Rebuild, Prune::Kept),
    table("facts_bill_hour", Owner::Report, "the report's queueing (capacity billed)", Check::Rebuild, Prune::Kept),
    table("facts_configs", Owner::Report, "the report's reruns", Check::Rebuild, Prune::Kept),
    table("facts_charges", Owner::Report, "the report's billing", Check::Rebuild, Prune::Kept),
    table(
        "facts_prevented",
        Owner::Report,
        "the report's \"prevented\" and \"dry-run would save\"",
        Check::Rebuild,
        Prune::Kept,
    ),
];

/// The derived tables `owner` writes that `check` applies to.
pub fn derived_tables(owner: Owner, check: Check) -> impl Iterator<Item = &'static DerivedTable> {
    DERIVED_TABLES.iter().filter(move |t| t.owner == owner && t.check == check)
}

/// The derived tables missing from the database at `path`.
pub fn missing_tables(path: &Path, tables: &[&DerivedTable]) -> Result<Vec<&'static str>> {
    let mut out = Vec::new();
    for t in tables {
        if !has_table(path, t.name)? {
            out.push(t.name);
        }
    }
    Ok(out)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_look_up_table_is_a_derived_table_pruned_with_its_chain() {
        for l in crate::log::LOOKUPS {
            let t = DERIVED_TABLES
                .iter()
                .find(|t| t.name == l.table)
                .unwrap_or_else(|| panic!("{} is not listed", l.table));
            assert_eq!(t.prune, Prune::With { chain: l.chain, column: "seq" }, "{}", l.table);
        }
    }

    /// docs/audit.md's "Derived tables" lists exactly the tables of [`DERIVED_TABLES`] (the first
    /// column of its table, each name in backticks), so the page cannot fall behind the list.
    #[test]
    fn docs_audit_md_names_every_derived_table() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/audit.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let section =
            doc.split("\n### Derived tables\n").nth(1).expect("docs/audit.md has a \"Derived tables\" section");
        let section = section.split("\n#").next().unwrap_or_default();
        let mut named: Vec<&str> = section
            .lines()
            .filter(|l| l.starts_with("| `"))
            .flat_map(|l| l.split('|').nth(1).unwrap_or_default().split(','))
            .map(|c| c.trim().trim_matches('`'))
            .collect();
        named.sort_unstable();
        let mut listed: Vec<&str> = DERIVED_TABLES.iter().map(|t| t.name).collect();
        listed.sort_unstable();
        assert_eq!(named, listed, "docs/audit.md, \"Derived tables\", against DERIVED_TABLES");
    }
}
