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
//! Every line takes the one road ([`crate::road`]) like an HTTP body's: checked against the caller's
//! powers, charged to its write budget, answered once durable; when the backend cannot take inputs
//! (the audit log cannot commit, NATS is unreachable), each line is answered with why, at once, as
//! HTTP answers 503. The socket serves single-node serve and a cluster instance alike.
//!
//! Connections are capped as the HTTP listeners' are, per peer UID where they go per address
//! ([`SocketLimits`]): at most so many open, so many from one UID, and so many from one UID holding
//! a line not yet ended — what a peer can make serve hold is that many times the line limit, and a
//! connection over a cap is answered with why and closed. (256 connections each sending 8 MiB
//! without a newline took serve from 116 MB to 2.38 GB.) A connection's buffer shrinks back once
//! its long line is done, and goes with it.
//!
//! Who may connect is decided by the socket file's permissions (`--socket-mode`, `0660` by default:
//! the user bursar runs as and its group). Who a connection *is* comes from the kernel: the peer's
//! UID (`SO_PEERCRED`), whose user is a person (the `[auth] people` roles, or a `[[person]]`
//! table's), or the principal whose `unix_users` lists it, and each line is checked against those
//! powers.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bursar_auth::Caller;
use bursar_model::api::{Rejected, SocketAnswer};
use bursar_session::{Framer, Incoming, Line, Origin, decode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

use crate::backend::{Backend, Fate, Outcome};
use crate::road::Door;

/// Lines sent to the backend in one request at most.
pub const MAX_LINES: usize = 1024;

/// The socket's caps: the listeners' (`--max-connections`, `--max-connections-per-address`,
/// `--max-unfinished-per-address`), per peer UID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketLimits {
    /// Open connections at most.
    pub max_connections: usize,
    /// Open connections of one UID at most.
    pub max_per_uid: usize,
    /// Connections of one UID holding a line not yet ended, at most.
    pub max_unfinished_per_uid: usize,
}

/// Who holds which connections, for [`SocketLimits`].
#[derive(Debug, Default)]
struct Peers {
    /// Per UID: open connections, and those holding an unfinished line.
    by_uid: Mutex<HashMap<u32, (usize, usize)>>,
}

impl Peers {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<u32, (usize, usize)>) -> T) -> T {
        match self.by_uid.lock() {
            Ok(mut g) => f(&mut g),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }

    /// Counts a new connection of `uid`, or says which cap it is over.
    fn open(self: &Arc<Self>, uid: u32, limits: SocketLimits) -> Result<Held, String> {
        self.with(|m| {
            let total: usize = m.values().map(|(open, _)| open).sum();
            if total >= limits.max_connections {
                return Err(format!(
                    "the event socket has {total} connections open, its limit (--max-connections); try again later"
                ));
            }
            let e = m.entry(uid).or_default();
            if e.0 >= limits.max_per_uid {
                return Err(format!(
                    "uid {uid} has {} connections open on the event socket, its limit (--max-connections-per-address); close one",
                    e.0
                ));
            }
            e.0 += 1;
            Ok(Held { peers: self.clone(), uid, unfinished: false })
        })
    }
}

/// One counted connection, uncounted when dropped.
struct Held {
    peers: Arc<Peers>,
    uid: u32,
    unfinished: bool,
}

impl Held {
    /// Marks whether the connection holds a line not yet ended; false when that is over the UID's cap.
    fn unfinished(&mut self, now: bool, limits: SocketLimits) -> bool {
        if now == self.unfinished {
            return true;
        }
        let uid = self.uid;
        let ok = self.peers.with(|m| {
            let e = m.entry(uid).or_default();
            if now {
                if e.1 >= limits.max_unfinished_per_uid {
                    return false;
                }
                e.1 += 1;
            } else {
                e.1 = e.1.saturating_sub(1);
            }
            true
        });
        if ok {
            self.unfinished = now;
        }
        ok
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let (uid, unfinished) = (self.uid, self.unfinished);
        self.peers.with(|m| {
            if let Some(e) = m.get_mut(&uid) {
                e.0 = e.0.saturating_sub(1);
                if unfinished {
                    e.1 = e.1.saturating_sub(1);
                }
                if *e == (0, 0) {
                    m.remove(&uid);
                }
            }
        });
    }
}

/// Binds `path` (replacing a stale socket file) with permission bits `mode` and serves connections
/// over `door` under `limits` until `shutdown` turns true.
pub fn listen<B: Backend>(
    path: &Path,
    door: Door<B>,
    mode: u32,
    limits: SocketLimits,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    if path.exists() {
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    let path: PathBuf = path.to_path_buf();
    let peers = Arc::new(Peers::default());
    Ok(tokio::spawn(async move {
        let mut stop = shutdown.clone();
        loop {
            tokio::select! {
                conn = listener.accept() => match conn {
                    Ok((stream, _)) => {
                        let uid = stream.peer_cred().map(|c| c.uid()).unwrap_or(u32::MAX);
                        match peers.open(uid, limits) {
                            Ok(held) => {
                                tokio::spawn(connection(stream, door.clone(), held, limits, shutdown.clone()));
                            }
                            Err(why) => {
                                tracing::warn!(uid, reason = %why, "event socket connection refused");
                                tokio::spawn(refuse(stream, why));
                            }
                        }
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

/// One line's place in the answers: rejected now, or waiting for the backend.
enum Slot {
    Answer(SocketAnswer),
    Sent,
}

/// The caller a socket peer is, or the error line to send it before closing.
fn peer_caller(stream: &UnixStream, auth: &crate::auth::SharedAuth) -> Result<Arc<Caller>, String> {
    let a = crate::auth::current(auth);
    if a.is_open() {
        return Ok(Arc::new(Caller::open()));
    }
    let cred = stream.peer_cred().map_err(|e| format!("cannot read the peer's credentials: {e}"))?;
    let uid = cred.uid();
    let name = bursar_auth::user_of_uid(uid).ok_or_else(|| {
        format!("uid {uid} has no user name on this host; bursar does not make one up (add the user to this host's passwd or directory)")
    })?;
    let presented = bursar_auth::Presented { unix: Some((uid, name)), ..Default::default() };
    a.authenticate(&presented, bursar_model::Timestamp::wall_clock()).map(Arc::new).map_err(|e| e.to_string())
}

/// Answers a connection over a cap with why, and closes it.
async fn refuse(stream: UnixStream, why: String) {
    let (_, mut write) = stream.into_split();
    let mut out = Vec::new();
    answer_line(&mut out, &SocketAnswer::Rejected(Rejected { source: None, line: 0, error: why }));
    let _ = write.write_all(&out).await;
    let _ = write.shutdown().await;
}

/// The answer line of one outcome.
fn answer_of(a: Outcome) -> SocketAnswer {
    match a.fate {
        Fate::Accepted(decisions) => SocketAnswer::Accepted { line: a.line, id: a.id, accepted: true, decisions },
        Fate::Duplicate => SocketAnswer::Duplicate { line: a.line, id: a.id, duplicate: true },
        Fate::Denied(r) => {
            SocketAnswer::Rejected(Rejected { source: None, line: a.line, error: r.message().to_owned() })
        }
        Fate::Refused(r) => {
            SocketAnswer::Rejected(Rejected { source: None, line: a.line, error: format!("refused: {}", r.reason) })
        }
    }
}

async fn connection<B: Backend>(
    stream: UnixStream,
    door: Door<B>,
    mut held: Held,
    limits: SocketLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    let caller = match peer_caller(&stream, &door.auth.auth) {
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
    let mut framer = Framer::new(door.max_line);
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
                let (mut ok, denied) = door.lines(&caller, vec![Incoming::new(line, d.text.to_owned(), d.input)]);
                match (ok.pop(), denied.into_iter().next()) {
                    (Some(item), _) => {
                        order.push(Slot::Sent);
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
        // Everything this read completed goes down the road together, MAX_LINES per request.
        let mut outcomes = Vec::with_capacity(items.len());
        while !items.is_empty() {
            let rest = if items.len() > MAX_LINES { items.split_off(MAX_LINES) } else { Vec::new() };
            let chunk = std::mem::replace(&mut items, rest);
            let lines: Vec<(u64, String)> = chunk.iter().map(|i| (i.line, i.input.id().into_owned())).collect();
            match door.send(&caller, chunk, None).await {
                Ok(s) => outcomes.extend(s.outcomes.into_iter().map(answer_of)),
                // Refused whole (a spent budget, a log that cannot commit, a stopping engine): every
                // line of the chunk is answered with why, and the connection goes on.
                Err(r) => outcomes.extend(lines.into_iter().map(|(line, _)| {
                    SocketAnswer::Rejected(Rejected { source: None, line, error: r.message().to_owned() })
                })),
            }
        }
        let mut outcomes = outcomes.into_iter();
        let mut answers = Vec::with_capacity(order.len());
        for slot in order {
            match slot {
                Slot::Answer(a) => answers.push(a),
                Slot::Sent => {
                    let Some(a) = outcomes.next() else { return };
                    answers.push(a);
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
        // A line not yet ended holds up to the line limit: it counts against the UID's cap of such
        // connections, and a buffer grown for a long line is given back once the line is done.
        let waiting = framer.pending() > 0;
        if !held.unfinished(waiting, limits) {
            let why = format!(
                "uid {} already has {} connections on the event socket holding a line not yet ended, its limit (--max-unfinished-per-address); end your lines with a newline",
                held.uid, limits.max_unfinished_per_uid
            );
            tracing::warn!(uid = held.uid, "event socket connection closed: too many unfinished lines");
            let mut out = Vec::new();
            answer_line(
                &mut out,
                &SocketAnswer::Rejected(Rejected { source: None, line: framer.lines() + 1, error: why }),
            );
            let _ = write.write_all(&out).await;
            let _ = write.shutdown().await;
            return;
        }
        if !waiting {
            framer.shrink();
        }
    }
    let _ = write.shutdown().await;
}
