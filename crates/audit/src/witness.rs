//! Signed heads and the witness: what lets `verify` catch a log that was truncated, rolled back or
//! re-hashed by someone who can write the database.
//!
//! The hash chains are keyless on purpose (anyone can verify them), so whoever can write the file can
//! also recompute every hash after an edit, or cut the newest rows and every chain with them. A
//! **signed head** closes that gap: bursar signs the newest anchor ([`crate::anchor`], whose hash
//! covers every chain) with an Ed25519 key kept outside the database, and appends the signed line to a
//! **witness**, a file the attacker cannot edit along with the database (another disk, another
//! machine's mount, a file only bursar's user may append to). `verify --witness` then checks the log
//! against every signed line: a log that lacks a signed anchor was truncated or rolled back, one whose
//! anchor hash differs was rewritten.
//!
//! One line, one JSON object (the field order is fixed; unknown fields are ignored):
//!
//! ```text
//! {"bursar_signed_head":1,"log":"<hex>","at":1793610000000,"anchors":{"seq":57,"hash":"<hex>"},
//!  "events":{"seq":40,"hash":"<hex>"},"decisions":{…},"policy_loads":{…},"key":"<hex>","sig":"<hex>"}
//! ```
//!
//! `sig` signs [`SignedHead::message`]: the same fields as text, one per line, under a version
//! header. A reader may find the line anywhere in a text line (after a syslog prefix, say): it starts
//! at the first `{` of a line that contains `"bursar_signed_head"`.
//!
//! Key files are text: `bursar-ed25519-secret-key <64 hex digits>` (mode 0600, refused if others may
//! read it) and `bursar-ed25519-public-key <64 hex digits>`. [`SigningKey::generate`] draws the secret
//! from the operating system (`getrandom`).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ed25519_dalek::ed25519::signature::Signer as _;
use serde::{Deserialize, Serialize};

use crate::canon::hex;
use crate::error::{AuditError, Result};
use crate::log::{Head, wall_ms};

const SECRET_TAG: &str = "bursar-ed25519-secret-key";
const PUBLIC_TAG: &str = "bursar-ed25519-public-key";
/// The key every signed-head line carries, and its version.
pub const LINE_TAG: &str = "bursar_signed_head";

/// Decodes lower- or upper-case hex.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| s.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok())).collect()
}

fn key_err(path: &Path, message: impl Into<String>) -> AuditError {
    AuditError::Key { path: path.display().to_string(), message: message.into() }
}

fn read_tagged(path: &Path, tag: &str) -> Result<[u8; 32]> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        key_err(path, format!("cannot read it: {e}\n  help: create a key pair with `bursar audit keygen --out PREFIX`"))
    })?;
    let mut words = text.split_whitespace();
    let (Some(t), Some(h), None) = (words.next(), words.next(), words.next()) else {
        return Err(key_err(
            path,
            format!("is not a `{tag}` file\n  help: it holds one line: `{tag} <64 hex digits>`"),
        ));
    };
    if t != tag {
        return Err(key_err(
            path,
            format!("is a `{t}` file, not a `{tag}` one\n  help: pass the other file of the pair"),
        ));
    }
    let bytes = unhex(h).filter(|b| b.len() == 32).ok_or_else(|| {
        key_err(path, format!("the key is not 64 hex digits\n  help: it holds one line: `{tag} <64 hex digits>`"))
    })?;
    let mut out = [0u8; 32];
    out.copy_from_slice(&bytes);
    Ok(out)
}

/// An Ed25519 signing key (the secret half). Its `Debug` never prints the secret.
pub struct SigningKey(ed25519_dalek::SigningKey);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").field("public", &self.public().to_hex()).finish_non_exhaustive()
    }
}

impl SigningKey {
    /// A new key from the operating system's random source.
    pub fn generate() -> Result<SigningKey> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed)
            .map_err(|e| AuditError::Invalid(format!("cannot draw a random key from the operating system: {e}")))?;
        Ok(SigningKey(ed25519_dalek::SigningKey::from_bytes(&seed)))
    }

    /// The key with this 32-byte secret.
    pub fn from_bytes(secret: &[u8; 32]) -> SigningKey {
        SigningKey(ed25519_dalek::SigningKey::from_bytes(secret))
    }

    /// Reads a secret key file, refusing one that others may read.
    pub fn from_file(path: impl AsRef<Path>) -> Result<SigningKey> {
        let path = path.as_ref();
        let secret = read_tagged(path, SECRET_TAG)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if let Ok(meta) = std::fs::metadata(path) {
                let mode = meta.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    return Err(key_err(
                        path,
                        format!(
                            "the signing key may be read by others (mode {mode:04o})\n  help: `chmod 600 {}`; anyone who can read it can sign a rewritten log",
                            path.display()
                        ),
                    ));
                }
            }
        }
        if weak_key(&secret) {
            return Err(key_err(
                path,
                format!(
                    "the signing key is not random (every byte is {:#04x})\n  help: make a new pair with `bursar audit keygen`; a key anyone can guess signs anyone's log",
                    secret.first().copied().unwrap_or(0)
                ),
            ));
        }
        Ok(SigningKey::from_bytes(&secret))
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// Writes the pair: the secret to `secret` (created with mode 0600) and the public key to
    /// `public`. Refuses to overwrite either.
    pub fn write_pair(&self, secret: &Path, public: &Path) -> Result<()> {
        for p in [secret, public] {
            if p.exists() {
                return Err(key_err(
                    p,
                    "exists already\n  help: choose another name; an existing key is never overwritten",
                ));
            }
        }
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let line = format!("{SECRET_TAG} {}\n", hex(self.0.as_bytes()));
        opts.open(secret)
            .and_then(|mut f| f.write_all(line.as_bytes()).and_then(|()| f.sync_all()))
            .map_err(|e| key_err(secret, format!("cannot write it: {e}")))?;
        std::fs::write(public, format!("{PUBLIC_TAG} {}\n", self.public().to_hex()))
            .map_err(|e| key_err(public, format!("cannot write it: {e}")))
    }

    fn sign(&self, msg: &[u8]) -> [u8; 64] {
        self.0.sign(msg).to_bytes()
    }
}

/// An Ed25519 public key, to check signed heads with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(ed25519_dalek::VerifyingKey);

impl PublicKey {
    /// Reads a public key file (a secret key file is accepted too: its public half is used).
    pub fn from_file(path: impl AsRef<Path>) -> Result<PublicKey> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.starts_with(SECRET_TAG) {
            return SigningKey::from_file(path).map(|k| k.public());
        }
        let bytes = read_tagged(path, PUBLIC_TAG)?;
        PublicKey::from_bytes(&bytes).map_err(|m| key_err(path, m))
    }

    /// The key with these 32 bytes.
    pub fn from_bytes(bytes: &[u8; 32]) -> std::result::Result<PublicKey, String> {
        ed25519_dalek::VerifyingKey::from_bytes(bytes)
            .map(PublicKey)
            .map_err(|_| "is not a valid Ed25519 public key".to_owned())
    }

    /// The key as 64 hex digits.
    pub fn to_hex(&self) -> String {
        hex(self.0.as_bytes())
    }
}

/// A position in one chain, as a signed head carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedPos {
    /// The last sequence number.
    pub seq: i64,
    /// Its hash, hex.
    pub hash: String,
}

impl From<Head> for SignedPos {
    fn from(h: Head) -> SignedPos {
        SignedPos { seq: h.seq, hash: hex(&h.hash) }
    }
}

/// One signed head: the log's identity, when, every chain's head, the public key and the signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedHead {
    /// Format version (1).
    pub bursar_signed_head: u32,
    /// The log's identity: the hash of its first anchor.
    pub log: String,
    /// Wall time of signing, ms since the epoch.
    pub at: i64,
    /// The newest anchor: it covers everything else.
    pub anchors: SignedPos,
    /// The events chain.
    pub events: SignedPos,
    /// The decisions chain.
    pub decisions: SignedPos,
    /// The policy-loads chain.
    pub policy_loads: SignedPos,
    /// The public key, hex.
    pub key: String,
    /// The Ed25519 signature of [`SignedHead::message`], hex.
    pub sig: String,
}

impl SignedHead {
    /// The bytes signed: every field but `sig`, as text, under a version header.
    pub fn message(&self) -> Vec<u8> {
        let p = |name: &str, pos: &SignedPos| format!("{name} {} {}\n", pos.seq, pos.hash);
        format!(
            "bursar-audit signed head v{}\nlog {}\nat {}\n{}{}{}{}key {}\n",
            self.bursar_signed_head,
            self.log,
            self.at,
            p("anchors", &self.anchors),
            p("events", &self.events),
            p("decisions", &self.decisions),
            p("policy_loads", &self.policy_loads),
            self.key
        )
        .into_bytes()
    }

    /// The line written to a witness (no newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a signed head from a line: None when the line carries none (any other log line), else
    /// the head or why it cannot be read.
    pub fn parse_line(line: &str) -> Option<std::result::Result<SignedHead, String>> {
        if !line.contains(LINE_TAG) {
            return None;
        }
        let start = line.find('{')?;
        let json = line.get(start..)?.trim_end();
        Some(serde_json::from_str::<SignedHead>(json).map_err(|e| format!("not a signed head: {e}")))
    }

    /// Checks the signature against the key in the line, and that key against `pinned` if given.
    pub fn check(&self, pinned: Option<&PublicKey>) -> std::result::Result<(), String> {
        if self.bursar_signed_head != 1 {
            return Err(format!("version {} is not one this bursar reads", self.bursar_signed_head));
        }
        let key: [u8; 32] = unhex(&self.key)
            .and_then(|k| k.try_into().ok())
            .ok_or_else(|| "its key is not 64 hex digits".to_owned())?;
        let key = PublicKey::from_bytes(&key)?;
        if let Some(p) = pinned
            && *p != key
        {
            return Err(format!(
                "it was signed by key {}…, not by the given public key {}…",
                short(&self.key),
                short(&p.to_hex())
            ));
        }
        let sig: [u8; 64] = unhex(&self.sig)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| "its signature is not 128 hex digits".to_owned())?;
        key.0
            .verify_strict(&self.message(), &ed25519_dalek::Signature::from_bytes(&sig))
            .map_err(|_| "its signature does not match its content (the line was edited, or forged)".to_owned())
    }
}

fn short(h: &str) -> &str {
    h.get(..16).unwrap_or(h)
}

/// The heads a [`crate::AuditLog`] knows, to be signed.
#[derive(Debug, Clone)]
pub(crate) struct CurrentHeads {
    pub log: Option<String>,
    pub anchors: Head,
    pub events: Head,
    pub decisions: Head,
    pub loads: Head,
}

/// Signs `heads` with `key` at wall time `at`.
pub(crate) fn sign(key: &SigningKey, heads: &CurrentHeads, at: i64) -> SignedHead {
    let mut h = SignedHead {
        bursar_signed_head: 1,
        log: heads.log.clone().unwrap_or_default(),
        at,
        anchors: heads.anchors.into(),
        events: heads.events.into(),
        decisions: heads.decisions.into(),
        policy_loads: heads.loads.into(),
        key: key.public().to_hex(),
        sig: String::new(),
    };
    h.sig = hex(&key.sign(&h.message()));
    h
}

/// A signing key and the append-only file its signed heads go to; attach it to the writing
/// [`crate::AuditLog`] with [`crate::AuditLog::set_witness`].
#[derive(Debug)]
pub struct Witness {
    key: SigningKey,
    path: PathBuf,
    file: File,
    every: Duration,
    last: Option<Instant>,
    pending: bool,
    signed: u64,
}

/// A key whose bytes are all the same (all zeros, a file of `ff`s): written by hand or by a broken
/// generator, and guessable.
pub fn weak_key(bytes: &[u8]) -> bool {
    bytes.windows(2).all(|w| w[0] == w[1])
}

impl Witness {
    /// Opens (creating) the witness file `path` for appending, with `key` to sign. Every write is
    /// signed; see [`Witness::every`] to sign at most every so often.
    pub fn open(key: SigningKey, path: impl AsRef<Path>) -> Result<Witness> {
        let path = path.as_ref().to_path_buf();
        let mut opts = std::fs::OpenOptions::new();
        opts.append(true).create(true);
        #[cfg(unix)]
        {
            // Readable by the owner and its group (an auditor's), never by every local user.
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o640);
        }
        let file = opts.open(&path).map_err(|source| AuditError::Witness {
            action: "open",
            path: path.display().to_string(),
            source,
        })?;
        Ok(Witness { key, path, file, every: Duration::ZERO, last: None, pending: false, signed: 0 })
    }

    /// Signs at most once per `interval` (zero, the default: after every write). A write inside the
    /// interval stays pending until the next write after it, or [`crate::AuditLog::sign_pending`].
    pub fn every(mut self, interval: Duration) -> Witness {
        self.every = interval;
        self
    }

    /// The witness file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The public key lines are signed with.
    pub fn public_key(&self) -> PublicKey {
        self.key.public()
    }

    /// Signed heads appended so far.
    pub fn signed(&self) -> u64 {
        self.signed
    }

    pub(crate) fn pending(&self) -> bool {
        self.pending
    }

    pub(crate) fn mark_pending(&mut self) {
        self.pending = true;
    }

    pub(crate) fn due(&self) -> bool {
        self.every.is_zero() || self.last.is_none_or(|t| t.elapsed() >= self.every)
    }

    /// Signs `heads`, appends the line (one `write` of the whole line, to a file opened for
    /// appending) and, when `sync`, waits for it to reach the disk.
    pub(crate) fn sign(&mut self, heads: &CurrentHeads, sync: bool) -> Result<SignedHead> {
        let head = sign(&self.key, heads, wall_ms());
        let mut line = head.to_line();
        line.push('\n');
        let shown = || self.path.display().to_string();
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| if sync { self.file.sync_data() } else { Ok(()) })
            .map_err(|source| AuditError::Witness { action: "append to", path: shown(), source })?;
        self.pending = false;
        self.last = Some(Instant::now());
        self.signed += 1;
        Ok(head)
    }
}

/// Signs the current head of `log` with `key` (without a witness attached): `bursar audit head`.
pub fn sign_now(log: &crate::AuditLog, key: &SigningKey) -> Result<SignedHead> {
    Ok(sign(key, &log.current_heads(), wall_ms()))
}

/// One line of a witness file that carries a signed head: its line number and the head, or why it
/// cannot be read.
pub type WitnessLine = (usize, std::result::Result<SignedHead, String>);

/// Reads every signed head of a witness file (lines without one are skipped: a syslog extract works).
pub fn read(path: impl AsRef<Path>) -> Result<Vec<WitnessLine>> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| AuditError::Witness {
        action: "read",
        path: path.display().to_string(),
        source,
    })?;
    Ok(text.lines().enumerate().filter_map(|(i, l)| SignedHead::parse_line(l).map(|h| (i + 1, h))).collect())
}

/// Hands the lines of the witness file at `path` to `f`, newest first, until `f` returns false: the
/// file is read backwards in blocks, so finding the newest heads costs the same on a witness of a
/// year as on one of a minute. A missing file has no lines.
pub fn newest_first(path: impl AsRef<Path>, mut f: impl FnMut(&str) -> Result<bool>) -> Result<()> {
    const BLOCK: u64 = 64 * 1024;
    let path = path.as_ref();
    let err = |source| AuditError::Witness { action: "read", path: path.display().to_string(), source };
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(err(e)),
    };
    let mut pos = file.metadata().map_err(err)?.len();
    // The bytes after `pos` that do not yet start with a whole line.
    let mut rest: Vec<u8> = Vec::new();
    while pos > 0 {
        let n = BLOCK.min(pos);
        pos -= n;
        let mut block = vec![0u8; usize::try_from(n).unwrap_or(0)];
        file.seek(SeekFrom::Start(pos)).and_then(|_| file.read_exact(&mut block)).map_err(err)?;
        block.extend_from_slice(&rest);
        rest = block;
        let mut end = rest.len();
        while let Some(i) = rest.get(..end).and_then(|b| b.iter().rposition(|c| *c == b'\n')) {
            let line = rest.get(i + 1..end).unwrap_or_default();
            if !line.is_empty() && !f(&String::from_utf8_lossy(line))? {
                return Ok(());
            }
            end = i;
        }
        rest.truncate(end);
    }
    if !rest.is_empty() {
        f(&String::from_utf8_lossy(&rest))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_first_reads_every_line_backwards_across_blocks() {
        let dir = std::env::temp_dir().join(format!("bursar-newest-first-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("w.jsonl");
        // Lines of varied length that straddle the 64 KiB blocks, the last one without a newline.
        let lines: Vec<String> = (0..5000).map(|i| format!("line {i} {}", "x".repeat(i % 97))).collect();
        std::fs::write(&path, lines.join("\n")).unwrap();
        let mut got = Vec::new();
        newest_first(&path, |l| {
            got.push(l.to_owned());
            Ok(true)
        })
        .unwrap();
        got.reverse();
        assert_eq!(got, lines);
        // Stopping early, and a missing file.
        let mut n = 0;
        newest_first(&path, |_| {
            n += 1;
            Ok(n < 3)
        })
        .unwrap();
        assert_eq!(n, 3);
        newest_first(dir.join("none"), |_| panic!("a missing file has no lines")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
