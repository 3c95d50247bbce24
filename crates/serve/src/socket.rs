//! Events over a Unix socket (`--socket PATH`): a producer on the same machine writes JSON Lines and
//! reads one JSON answer line per input line, in order, each sent once the event is durable.
//!
//! Answers are [`SocketAnswer`]s: `{"line":N,"id":"e1","accepted":true,"decisions":[…]}`,
//! `{"line":N,"id":"e1","duplicate":true}` or `{"line":N,"error":"…"}` for a rejected line (which
//! changes nothing and never stops the stream). Lines are framed and decoded by the session crate,
//! like every other source: the line-length limit is enforced while reading (a peer that never sends a
//! newline costs at most the limit), and a line that is not UTF-8 costs only itself. Lines already
//! received are sent to the engine together (up to [`MAX_LINES`]), so a fast producer gets group
//! commit; a producer that waits for each answer gets one commit per line.
//!
//! Who may connect is decided by the socket file's permissions (`--socket-mode`, `0660` by default:
//! the user bursar runs as and its group). Who a connection *is* comes from the kernel: the peer's
//! UID (`SO_PEERCRED`), whose user is a person (the `[auth] people` roles, or a `[[person]]`
//! table's), or the principal whose `unix_users` lists it, and each line is checked against those
//! powers like an HTTP body's and counted against the caller's write budget ([`crate::budget`]).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use bursar_auth::Caller;
use bursar_model::api::{Rejected, SocketAnswer};
use bursar_session::{Framer, Incoming, Line, Origin, decode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot, watch};

use crate::core::Work;

/// Lines sent to the engine in one request at most.
pub const MAX_LINES: usize = 1024;

/// Binds `path` (replacing a stale socket file) with permission bits `mode` and serves connections
/// until `shutdown` turns true.
pub fn listen(
    path: &Path,
    engine: mpsc::Sender<Work>,
    auth: crate::auth::SharedAuth,
    budgets: Arc<crate::budget::Budgets>,
    max_line: usize,
    mode: u32,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    if path.exists() {
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    let path: PathBuf = path.to_path_buf();
    Ok(tokio::spawn(async move {
        let mut stop = shutdown.clone();
        loop {
            tokio::select! {
                conn = listener.accept() => match conn {
                    Ok((stream, _)) => {
                        let budgets = budgets.clone();
                        tokio::spawn(connection(stream, engine.clone(), auth.clone(), budgets, max_line, shutdown.clone()));
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot accept on the event socket"),
                },
                _ = stop.changed() => break,
            }
        }
        let _ = std::fs::remove_file(&path);
    }))
}

fn answer_line(out: &mut Vec<u8>, a: &SocketAnswer) {
    if serde_json::to_writer(&mut *out, a).is_ok() {
        out.push(b'\n');
    }
}

/// One line's place in the answers: rejected now, or waiting for the engine.
enum Slot {
    Answer(SocketAnswer),
    Applied,
}

/// The caller a socket peer is, or the error line to send it before closing.
fn peer_caller(stream: &UnixStream, auth: &crate::auth::SharedAuth) -> Result<Arc<Caller>, String> {
    let a = crate::auth::current(auth);
    if a.is_open() {
        return Ok(Arc::new(Caller::open()));
    }
    let cred = stream.peer_cred().map_err(|e| format!("cannot read the peer's credentials: {e}"))?;
    let uid = cred.uid();
    let name = bursar_auth::user_of_uid(uid);
    let presented = bursar_auth::Presented { unix: Some((uid, name)), ..Default::default() };
    a.authenticate(&presented, bursar_model::Timestamp::wall_clock()).map(Arc::new).map_err(|e| e.to_string())
}

async fn connection(
    stream: UnixStream,
    engine: mpsc::Sender<Work>,
    auth: crate::auth::SharedAuth,
    budgets: Arc<crate::budget::Budgets>,
    max_line: usize,
    mut shutdown: watch::Receiver<bool>,
) {
    let caller = match peer_caller(&stream, &auth) {
        Ok(c) => c,
        Err(e) => {
            let (_, mut write) = stream.into_split();
            let mut out = Vec::new();
            answer_line(&mut out, &SocketAnswer::Rejected(Rejected { source: None, line: 0, error: e }));
            let _ = write.write_all(&out).await;
            return;
        }
    };
    let (mut read, mut write) = stream.into_split();
    let mut framer = Framer::new(max_line);
    let mut buf = vec![0u8; 64 * 1024];
    let mut eof = false;
    while !eof {
        let n = tokio::select! {
            r = read.read(&mut buf) => match r {
                Ok(n) => n,
                Err(_) => return,
            },
            _ = shutdown.changed() => return,
        };
        let mut items: Vec<Incoming> = Vec::new();
        let mut order: Vec<Slot> = Vec::new();
        let mut take = |frame: bursar_session::Frame<'_>| match decode(frame, Origin::Producer) {
            Line::Blank => {} // Blank lines get no answer, like in a file.
            Line::Rejected(r) => order.push(Slot::Answer(SocketAnswer::Rejected(r))),
            Line::Input(d) => {
                let line = d.line;
                let (mut ok, denied) =
                    crate::http::admit_lines(&caller, vec![Incoming::new(line, d.text.to_owned(), d.input)]);
                match (ok.pop(), denied.into_iter().next()) {
                    (Some(item), _) => {
                        order.push(Slot::Applied);
                        items.push(item);
                    }
                    (None, Some(r)) => order.push(Slot::Answer(SocketAnswer::Rejected(r))),
                    (None, None) => {}
                }
            }
        };
        if n == 0 {
            eof = true;
            framer.finish(&mut take);
        } else {
            framer.push(&buf[..n], &mut take);
        }
        // Everything this read completed goes to the engine together, MAX_LINES per request.
        let mut outcomes = Vec::with_capacity(items.len());
        while !items.is_empty() {
            let rest = if items.len() > MAX_LINES { items.split_off(MAX_LINES) } else { Vec::new() };
            let chunk = std::mem::replace(&mut items, rest);
            // The write budget, like an HTTP request's ([`crate::budget`]): over it, every line of
            // the chunk is answered with the refusal and nothing of it is applied.
            let bytes: usize = chunk.iter().map(|i| i.raw.len()).sum();
            if let Err(over) = budgets.charge(&caller, chunk.len() as u64, bytes as u64) {
                if over.journal
                    && let Some(first) = chunk.first()
                {
                    let reason = over.message.lines().next().unwrap_or("").to_owned();
                    let _ = engine.send(Work::Refusal { item: Box::new(first.clone()), reason }).await;
                }
                outcomes.extend(chunk.into_iter().map(|i| crate::core::Outcome {
                    line: i.line,
                    id: i.input.id().into_owned(),
                    duplicate: false,
                    decisions: Vec::new(),
                    denied: Some(over.message.clone()),
                    unknown_job: false,
                    refused: None,
                }));
                continue;
            }
            let (tx, rx) = oneshot::channel();
            if engine.send(Work::Inputs { items: chunk, caller: Some(caller.clone()), reply: tx }).await.is_err() {
                return;
            }
            match rx.await {
                Ok(Ok(a)) => outcomes.extend(a),
                _ => return,
            }
        }
        let mut outcomes = outcomes.into_iter();
        let mut answers = Vec::with_capacity(order.len());
        for slot in order {
            match slot {
                Slot::Answer(a) => answers.push(a),
                Slot::Applied => {
                    let Some(a) = outcomes.next() else { return };
                    let refusal =
                        a.denied.clone().or_else(|| a.refused.as_ref().map(|r| format!("refused: {}", r.reason)));
                    answers.push(if let Some(error) = refusal {
                        SocketAnswer::Rejected(Rejected { source: None, line: a.line, error })
                    } else if a.duplicate {
                        SocketAnswer::Duplicate { line: a.line, id: a.id, duplicate: true }
                    } else {
                        SocketAnswer::Accepted { line: a.line, id: a.id, accepted: true, decisions: a.decisions }
                    });
                }
            }
        }
        let mut out = Vec::new();
        for a in &answers {
            answer_line(&mut out, a);
        }
        if !out.is_empty() && write.write_all(&out).await.is_err() {
            return;
        }
    }
    let _ = write.shutdown().await;
}
