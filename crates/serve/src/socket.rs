//! Events over a Unix socket (`--socket PATH`): a producer on the same machine writes JSON Lines and
//! reads one JSON answer line per input line, in order, each sent once the event is durable.
//!
//! Answers: `{"line":N,"id":"e1","accepted":true,"decisions":[…]}`, `{"line":N,"id":"e1","duplicate":true}`
//! or `{"line":N,"error":"…"}` for a malformed line (which changes nothing and never stops the stream).
//! Lines already buffered are sent to the engine together (up to [`MAX_LINES`]), so a fast producer
//! gets group commit; a producer that waits for each answer gets one commit per line. The socket is
//! guarded by file-system permissions (create it in a directory only the producers can reach); the
//! HTTP bearer token does not apply to it.

use std::path::{Path, PathBuf};

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot, watch};

use crate::core::{Incoming, TICK_PREFIX, Work};

/// Lines sent to the engine in one request at most.
pub const MAX_LINES: usize = 1024;

/// Binds `path` (replacing a stale socket file) and serves connections until `shutdown` turns true.
pub fn listen(
    path: &Path,
    engine: mpsc::Sender<Work>,
    max_line: usize,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    if path.exists() {
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    let path: PathBuf = path.to_path_buf();
    Ok(tokio::spawn(async move {
        let mut stop = shutdown.clone();
        loop {
            tokio::select! {
                conn = listener.accept() => match conn {
                    Ok((stream, _)) => {
                        tokio::spawn(connection(stream, engine.clone(), max_line, shutdown.clone()));
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot accept on the event socket"),
                },
                _ = stop.changed() => break,
            }
        }
        let _ = std::fs::remove_file(&path);
    }))
}

fn answer_line(out: &mut Vec<u8>, v: &serde_json::Value) {
    if serde_json::to_writer(&mut *out, v).is_ok() {
        out.push(b'\n');
    }
}

async fn connection(
    stream: UnixStream,
    engine: mpsc::Sender<Work>,
    max_line: usize,
    mut shutdown: watch::Receiver<bool>,
) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::with_capacity(64 * 1024, read);
    let mut line_no = 0usize;
    let mut buf = Vec::new();
    loop {
        // One batch: the first line (waiting for it), then whatever is already buffered.
        let mut items: Vec<Incoming> = Vec::new();
        let mut order: Vec<(usize, Option<serde_json::Value>)> = Vec::new();
        let mut eof = false;
        loop {
            buf.clear();
            let n = tokio::select! {
                r = reader.read_until(b'\n', &mut buf) => match r {
                    Ok(n) => n,
                    Err(_) => return,
                },
                _ = shutdown.changed() => return,
            };
            if n == 0 {
                eof = true;
                break;
            }
            line_no += 1;
            let text = match std::str::from_utf8(&buf) {
                Ok(t) => t.trim_end_matches(['\n', '\r']),
                Err(_) => {
                    order.push((line_no, Some(json!({"line": line_no, "error": "line is not valid UTF-8"}))));
                    continue;
                }
            };
            if text.trim().is_empty() {
                // Blank lines get no answer, like in a file.
            } else if text.len() > max_line {
                order.push((
                    line_no,
                    Some(json!({"line": line_no, "error": format!("line longer than {max_line} bytes")})),
                ));
            } else {
                match bursar_model::decode_event(text) {
                    Ok(ev) if ev.id.starts_with(TICK_PREFIX) => order.push((
                        line_no,
                        Some(json!({"line": line_no, "error": format!("event ids starting with `{TICK_PREFIX}` are reserved for bursar's own clock")})),
                    )),
                    Ok(event) => {
                        order.push((line_no, None));
                        items.push(Incoming { line: line_no, raw: text.to_owned(), event });
                    }
                    Err(e) => order.push((line_no, Some(json!({"line": line_no, "error": e.to_string()})))),
                }
            }
            if order.len() >= MAX_LINES || reader.buffer().is_empty() {
                break;
            }
        }
        let mut applied = Vec::new().into_iter();
        if !items.is_empty() {
            let (tx, rx) = oneshot::channel();
            if engine.send(Work::Events { items, reply: tx }).await.is_err() {
                return;
            }
            match rx.await {
                Ok(Ok(a)) => applied = a.into_iter(),
                _ => return,
            }
        }
        let mut out = Vec::new();
        for (_, rejected) in order {
            match rejected {
                Some(v) => answer_line(&mut out, &v),
                None => {
                    let Some(a) = applied.next() else { return };
                    let v = if a.duplicate {
                        json!({"line": a.line, "id": a.event_id, "duplicate": true})
                    } else {
                        let decisions: Vec<serde_json::Value> =
                            a.decisions.iter().filter_map(|d| serde_json::from_str(&d.to_json()).ok()).collect();
                        json!({"line": a.line, "id": a.event_id, "accepted": true, "decisions": decisions})
                    };
                    answer_line(&mut out, &v);
                }
            }
        }
        if write.write_all(&out).await.is_err() {
            return;
        }
        if eof {
            let _ = write.shutdown().await;
            return;
        }
    }
}
