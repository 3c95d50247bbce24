//! Queries: filters, `explain`, `stats`.
