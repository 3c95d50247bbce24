//! Framing: bytes in, numbered lines out, with a bound on a line's length enforced while reading.
//!
//! [`Framer`] is sans-I/O: every source pushes the bytes it has (a file's chunks, an HTTP body at once,
//! a socket's reads as they arrive) and gets back each complete line with its true 1-based number. A
//! line longer than the limit is reported as [`Frame::TooLong`] with its number and its bytes are
//! dropped as they arrive, so a peer that never sends a newline costs at most the limit in memory.
//! Nothing is interpreted here: a line that is not UTF-8 is still a line (the decoder says so), which
//! is why a bad byte can never swallow the line after it.

/// One line of input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A complete line, without its `\n` (and without a `\r` before it).
    Line {
        /// 1-based line number.
        line: u64,
        /// The bytes.
        bytes: &'a [u8],
    },
    /// A line longer than the limit; its bytes were discarded.
    TooLong {
        /// 1-based line number.
        line: u64,
        /// Its length in bytes (as far as it was read, when it was cut off by the end of input).
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// Cuts a byte stream into lines.
#[derive(Debug)]
pub struct Framer {
    buf: Vec<u8>,
    line: u64,
    max: usize,
    /// Length so far of a line being discarded for being too long.
    skipping: Option<usize>,
}

fn trim_cr(b: &[u8]) -> &[u8] {
    b.strip_suffix(b"\r").unwrap_or(b)
}

impl Framer {
    /// A framer that refuses lines longer than `max_line` bytes.
    pub fn new(max_line: usize) -> Framer {
        Framer { buf: Vec::new(), line: 0, max: max_line.max(1), skipping: None }
    }

    /// The number of the last line handed out.
    pub fn lines(&self) -> u64 {
        self.line
    }

    /// Gives back the memory a long line grew the buffer to, once no line is held (a connection
    /// that sent one 8 MiB line keeps 64 KiB, not 8 MiB).
    pub fn shrink(&mut self) {
        if self.buf.is_empty() && self.buf.capacity() > 64 * 1024 {
            self.buf = Vec::new();
        }
    }

    /// Bytes of an unfinished line held back (never more than the limit).
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Takes the next bytes of the stream and hands every line they complete to `out`, in order.
    pub fn push(&mut self, mut chunk: &[u8], mut out: impl FnMut(Frame<'_>)) {
        while !chunk.is_empty() {
            let nl = chunk.iter().position(|&b| b == b'\n');
            let (part, complete) = match nl {
                Some(i) => (&chunk[..i], true),
                None => (chunk, false),
            };
            chunk = &chunk[nl.map_or(chunk.len(), |i| i + 1)..];
            if let Some(len) = self.skipping.as_mut() {
                *len += part.len();
                if complete {
                    let len = *len;
                    self.skipping = None;
                    self.line += 1;
                    out(Frame::TooLong { line: self.line, len, max: self.max });
                }
                continue;
            }
            let total = self.buf.len() + part.len();
            if !complete {
                // One byte of slack: a `\r` at the end may be the first half of a CRLF.
                if total > self.max.saturating_add(1) {
                    self.buf.clear();
                    self.skipping = Some(total);
                } else {
                    self.buf.extend_from_slice(part);
                }
                continue;
            }
            self.line += 1;
            let cr = part.last().or(self.buf.last()) == Some(&b'\r');
            if total - usize::from(cr) > self.max {
                self.buf.clear();
                out(Frame::TooLong { line: self.line, len: total, max: self.max });
            } else if self.buf.is_empty() {
                out(Frame::Line { line: self.line, bytes: trim_cr(part) });
            } else {
                self.buf.extend_from_slice(part);
                out(Frame::Line { line: self.line, bytes: trim_cr(&self.buf) });
                self.buf.clear();
            }
        }
    }

    /// The end of the stream: hands out a last line that had no newline.
    pub fn finish(&mut self, mut out: impl FnMut(Frame<'_>)) {
        if let Some(len) = self.skipping.take() {
            self.line += 1;
            out(Frame::TooLong { line: self.line, len, max: self.max });
        } else if !self.buf.is_empty() {
            self.line += 1;
            if trim_cr(&self.buf).len() > self.max {
                out(Frame::TooLong { line: self.line, len: self.buf.len(), max: self.max });
            } else {
                out(Frame::Line { line: self.line, bytes: trim_cr(&self.buf) });
            }
            self.buf.clear();
        }
    }

    /// Frames a whole body (an HTTP request) at once.
    pub fn body(bytes: &[u8], max_line: usize, mut out: impl FnMut(Frame<'_>)) {
        let mut f = Framer::new(max_line);
        f.push(bytes, &mut out);
        f.finish(&mut out);
    }
}

/// Reads `source` to its end in chunks and hands every line to `on_frame`, in order, with its true
/// number: the one read loop behind every file and stdin source. `on_frame` may stop the read by
/// returning an error, which is handed back.
pub fn read_frames<E>(
    mut source: impl std::io::Read,
    max_line: usize,
    mut on_frame: impl FnMut(Frame<'_>) -> Result<(), E>,
) -> Result<(), ReadError<E>> {
    let mut framer = Framer::new(max_line);
    let mut buf = vec![0u8; 256 * 1024];
    let mut failed: Option<E> = None;
    loop {
        let n = match source.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadError::Read(e)),
        };
        framer.push(&buf[..n], |frame| {
            if failed.is_none()
                && let Err(e) = on_frame(frame)
            {
                failed = Some(e);
            }
        });
        if let Some(e) = failed.take() {
            return Err(ReadError::Stopped(e));
        }
    }
    framer.finish(|frame| {
        if failed.is_none()
            && let Err(e) = on_frame(frame)
        {
            failed = Some(e);
        }
    });
    match failed {
        Some(e) => Err(ReadError::Stopped(e)),
        None => Ok(()),
    }
}

/// Why [`read_frames`] stopped early.
#[derive(Debug)]
pub enum ReadError<E> {
    /// The source could not be read.
    Read(std::io::Error),
    /// The line handler stopped it.
    Stopped(E),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(chunks: &[&[u8]], max: usize) -> Vec<String> {
        let mut f = Framer::new(max);
        let mut out = Vec::new();
        let mut take = |fr: Frame<'_>| {
            out.push(match fr {
                Frame::Line { line, bytes } => format!("{line}:{}", String::from_utf8_lossy(bytes)),
                Frame::TooLong { line, len, .. } => format!("{line}:too long ({len})"),
            })
        };
        for c in chunks {
            f.push(c, &mut take);
        }
        f.finish(&mut take);
        out
    }

    #[test]
    fn lines_keep_their_true_numbers_across_chunks_and_bad_bytes() {
        // Regression: a line holding \xff made the reader skip the line after it.
        let got = frames(&[b"a\n\xff\xfe\nc", b"d\r\n\n", b"e"], 100);
        assert_eq!(got, ["1:a", "2:\u{fffd}\u{fffd}", "3:cd", "4:", "5:e"]);
    }

    #[test]
    fn a_line_over_the_limit_is_reported_and_never_buffered() {
        let mut f = Framer::new(4);
        let mut seen = Vec::new();
        f.push(b"ok\n0123456789", |fr| seen.push(format!("{fr:?}")));
        for _ in 0..1000 {
            f.push(&[b'x'; 1024], |fr| seen.push(format!("{fr:?}")));
            assert_eq!(f.pending(), 0, "a line past the limit is not held");
        }
        f.push(b"\nfine\n", |fr| seen.push(format!("{fr:?}")));
        assert_eq!(seen.len(), 3, "{seen:?}");
        assert!(seen[1].contains("TooLong { line: 2, len: 1024010, max: 4 }"), "{}", seen[1]);
        assert!(seen[2].contains("line: 3"), "{}", seen[2]);
    }

    #[test]
    fn the_limit_is_exact_and_a_crlf_does_not_count() {
        assert_eq!(frames(&[b"1234\n12345\n1234\r\n"], 4), ["1:1234", "2:too long (5)", "3:1234"]);
        assert_eq!(frames(&[b"12", b"34", b"5"], 4), ["1:too long (5)"]);
        assert_eq!(frames(&[b"12", b"34"], 4), ["1:1234"]);
    }
}
