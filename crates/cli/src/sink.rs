//! The journal of `bursar eval` without `--audit`: decisions as JSON lines on stdout.
//!
//! With `--audit`, the journal is the audit log's writer (`bursar_audit::Writer`), which prints each
//! group's decisions only after they are committed, so nothing printed is ever missing from the log.

use std::io::Write;

use bursar_session::{Entry, Journal, JournalError, Receipt};

/// Writes each entry's decisions as JSON lines to a writer (stdout, normally), buffered.
#[derive(Debug)]
pub struct JsonLines<W: Write> {
    out: W,
    buf: Vec<u8>,
}

impl<W: Write> JsonLines<W> {
    /// A journal over `out`.
    pub fn new(out: W) -> Self {
        JsonLines { out, buf: Vec::with_capacity(64 * 1024) }
    }
}

impl<W: Write> Journal for JsonLines<W> {
    fn append(&mut self, entry: Entry<'_>) -> Result<(), JournalError> {
        for d in entry.decisions.iter() {
            d.write_line(&mut self.buf);
        }
        if self.buf.len() >= 60 * 1024 {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Receipt>, JournalError> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.out.flush()?;
        Ok(Vec::new())
    }
}
