//! Where decisions go once the engine has made them.
//!
//! `eval` hands each event's decisions to a [`DecisionSink`]. The plain sink writes JSON lines to
//! stdout; the audit sink (see `bursar-audit`) first makes them durable and only then writes them, so
//! nothing printed is ever missing from the log.

use std::io::Write;

use bursar_model::{Decision, Event};

/// Receives the decisions of each event, in order.
pub trait DecisionSink {
    /// The decisions made for `event` (read from `raw`). Called for every applied event, even with no
    /// decisions, so a sink can record the event itself.
    fn accept(&mut self, raw: &str, event: &Event, decisions: &[Decision]) -> std::io::Result<()>;

    /// Called once at the end of the stream: flush and make everything durable.
    fn finish(&mut self) -> std::io::Result<()>;
}

/// Writes decisions as JSON lines to a writer (stdout, normally).
#[derive(Debug)]
pub struct JsonLines<W: Write> {
    out: W,
    buf: Vec<u8>,
}

impl<W: Write> JsonLines<W> {
    /// A sink over `out`.
    pub fn new(out: W) -> Self {
        JsonLines { out, buf: Vec::with_capacity(64 * 1024) }
    }
}

impl<W: Write> DecisionSink for JsonLines<W> {
    fn accept(&mut self, _raw: &str, _event: &Event, decisions: &[Decision]) -> std::io::Result<()> {
        for d in decisions {
            d.write_line(&mut self.buf);
        }
        if self.buf.len() >= 60 * 1024 {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.out.write_all(&self.buf)?;
        self.buf.clear();
        self.out.flush()
    }
}
