//! Issue 36, attacks 1 and 3, through the real `bursar` binary: what a witness vouches for.
//!
//! - A forged engine snapshot (a project's reserved GPU-hours set to 0) was restored by `serve` after
//!   a restart even with a witness: the snapshot check recomputed only its own keyless anchor, so
//!   re-hashing that anchor, or appending a matching one, made the forgery pass, and the project was
//!   admitted where it should have been denied. With a witness, restore now takes only a snapshot a
//!   signed head covers, and says on `/healthz` why it did not take the newest.
//! - Rows appended after the last signed head passed `verify --witness` with exit 0, and the next
//!   signing run (`eval`, `serve`) then covered them. Now `verify --witness` fails on them unless
//!   `--allow-unsigned-tail`, and a signing run refuses to start over them unless `--adopt-unsigned`,
//!   which records the adoption in the log.

#![expect(clippy::unwrap_used, reason = "test helpers: a failure is a test failure")]

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use crate::serve_support::*;
use rusqlite::Connection;
use serde_json::Value;

/// 100 GPU-hours a month per project.
const QUOTA: &str = r#"[[policy]]
id = "quota/monthly"
description = "100 GPU-hours a month per project"
kind = "quota"
gpu_hours = 100
"#;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// A key pair in `dir`: (secret, public).
fn keygen(dir: &Path) -> (PathBuf, PathBuf) {
    let out = bursar(&["audit", "keygen", "--out", s(&dir.join("audit"))]);
    assert!(out.status.success(), "{}", text(&out));
    (dir.join("audit.key"), dir.join("audit.pub"))
}

/// `bursar audit --db DB verify --witness W --public-key P EXTRA…`.
fn verify_witness(db: &Path, witness: &Path, public: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["audit", "--db", s(db), "verify", "--witness", s(witness), "--public-key", s(public)];
    args.extend_from_slice(extra);
    bursar(&args)
}

/// The anchor the newest line of `witness` signed (0: none).
fn newest_signed(witness: &Path) -> i64 {
    let text = std::fs::read_to_string(witness).unwrap_or_default();
    text.lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
        .and_then(|v| v["anchors"]["seq"].as_i64())
        .unwrap_or(0)
}

fn last_anchor(db: &Path) -> i64 {
    bursar_audit::AuditLog::open_read(db).unwrap().head().0
}

fn project(server: &Server) -> Value {
    let mut p = server.get_json("/v1/projects/nlp");
    if let Some(o) = p.as_object_mut() {
        o.remove("engine_time");
    }
    p
}

/// A signed serve log: nlp reserved 92 of its 100 GPU-hours, an engine snapshot of that, then a write
/// after the snapshot, and every anchor signed (serve killed with SIGKILL once the witness covers
/// the head, so the snapshot is not the newest anchor). Returns the scratch, the key pair, the
/// witness, the snapshot's event seq and nlp's view before the kill.
struct Witnessed {
    s: Scratch,
    key: PathBuf,
    public: PathBuf,
    witness: PathBuf,
    snapshot_seq: i64,
    before: Value,
}

impl Witnessed {
    fn args(&self) -> Vec<&str> {
        vec!["--signing-key", s(&self.key), "--witness", s(&self.witness)]
    }
}

fn witnessed(tag: &str) -> Witnessed {
    let sc = Scratch::new(tag);
    sc.write_policy("quota.toml", QUOTA);
    let (key, public) = keygen(&sc.0);
    let witness = sc.0.join("witness.jsonl");
    let server = Server::start(&sc, &["--snapshot-every", "1h", "--signing-key", s(&key), "--witness", s(&witness)]);
    for i in 1..=4 {
        // 2 GPUs for 11.5 h: 23 GPU-hours each, 92 in all.
        let d = server.post("/v1/admit", &submit(&format!("e{i}"), &format!("j{i}"), "nlp", 2, 11.5)).json().unwrap();
        assert_eq!(d["decision"], "allow", "{d}");
    }
    let r = server.post("/v1/snapshot", "");
    assert_eq!(r.status, 200, "{}", r.text());
    // A write after the snapshot, signed: serve signs at most once a second, after a commit.
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 1.. {
        std::thread::sleep(Duration::from_millis(1100));
        let r = server.post("/v1/events", &format!("{}\n", job_event(&format!("s{i}"), "job.started", "j1", "")));
        assert_eq!(r.status, 200, "{}", r.text());
        if newest_signed(&witness) == last_anchor(&sc.audit()) {
            break;
        }
        assert!(Instant::now() < deadline, "the witness never covered the head:\n{}", server.log_text());
    }
    let before = project(&server);
    server.kill9();
    let snapshot_seq: i64 = bursar_audit::AuditLog::open_read(sc.audit())
        .unwrap()
        .connection()
        .query_row("SELECT MAX(event_seq) FROM engine_snapshots", [], |r| r.get(0))
        .unwrap();
    let w = Witnessed { s: sc, key, public, witness, snapshot_seq, before };
    // What serve wrote verifies against its witness, nothing unsigned.
    let v = verify_witness(&w.s.audit(), &w.witness, &w.public, &[]);
    assert!(v.status.success(), "{}", text(&v));
    assert!(text(&v).contains("0 write(s) after it"), "{}", text(&v));
    w
}

/// Sets every number after a key named `reserved` or `held_gpus` to 0, in the text itself (a
/// round trip through `serde_json::Value` reorders the keys, and the engine's snapshot reads some
/// maps in order).
fn zero(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut rest = json;
    while let Some(i) =
        ["\"reserved\":", "\"held_gpus\":"].iter().filter_map(|k| rest.find(k).map(|i| i + k.len())).min()
    {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | 'e' | 'E' | '+')))
            .unwrap_or(rest.len());
        out.push('0');
        rest = &rest[n..];
    }
    out.push_str(rest);
    out
}

/// Rewrites the snapshot at `seq` with every reservation zeroed; returns the SHA-256 of the forgery.
fn forge_blob(conn: &Connection, seq: i64) -> Vec<u8> {
    let blob: Vec<u8> =
        conn.query_row("SELECT blob FROM engine_snapshots WHERE event_seq = ?1", [seq], |r| r.get(0)).unwrap();
    let original = String::from_utf8(blob).unwrap();
    let forged = zero(&original);
    assert_ne!(forged, original, "the snapshot holds reservations to zero");
    let forged = forged.into_bytes();
    conn.execute("UPDATE engine_snapshots SET blob = ?1 WHERE event_seq = ?2", (&forged, seq)).unwrap();
    <sha2::Sha256 as sha2::Digest>::digest(&forged).to_vec()
}

/// Recomputes the keyless hash of anchors row `seq` from its columns and its predecessor's hash,
/// as whoever edits the file can.
fn rehash_anchor(conn: &Connection, seq: i64) -> Vec<u8> {
    let prev: Vec<u8> = conn.query_row("SELECT hash FROM anchors WHERE seq = ?1", [seq - 1], |r| r.get(0)).unwrap();
    let prev: [u8; 32] = prev.try_into().unwrap();
    let hash = conn
        .query_row(
            "SELECT seq, at, kind, events_seq, events_hash, decisions_seq, decisions_hash, loads_seq, loads_hash, subject, subject_seq, digest, note FROM anchors WHERE seq = ?1",
            [seq],
            |r| {
                let mut c = bursar_audit::canon::Canon::after(&prev);
                for i in 0..13 {
                    c.value(r.get_ref(i)?);
                }
                Ok(c.finish().to_vec())
            },
        )
        .unwrap();
    conn.execute("UPDATE anchors SET hash = ?1 WHERE seq = ?2", (&hash, seq)).unwrap();
    hash
}

/// A job of 10 GPU-hours (2 GPUs for 5 h): over nlp's budget with 92 reserved, within it if the
/// forged snapshot's 0 is believed.
fn ten_gpu_hours(server: &Server) -> Value {
    server.post("/v1/admit", &submit("e-over", "j-over", "nlp", 2, 5.0)).json().unwrap()
}

fn healthz(server: &Server) -> String {
    let h = server.get("/healthz").unwrap();
    assert_eq!(h.status, 200, "{}", h.text());
    h.text()
}

#[test]
fn a_forged_snapshot_with_its_anchor_rehashed_is_not_restored_with_a_witness() {
    let w = witnessed("trust-rehashed");
    let db = w.s.audit();
    let log = bursar_audit::AuditLog::open(&db, bursar_audit::Durability::Fast).unwrap();
    let conn = log.connection();
    let sum = forge_blob(conn, w.snapshot_seq);
    let anchor: i64 = conn
        .query_row("SELECT MAX(seq) FROM anchors WHERE kind = 'snapshot' AND subject_seq = ?1", [w.snapshot_seq], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(anchor < last_anchor(&db), "a write follows the snapshot");
    conn.execute("UPDATE anchors SET digest = ?1 WHERE seq = ?2", (&sum, anchor)).unwrap();
    rehash_anchor(conn, anchor);
    drop(log);

    // The attack, without a witness: the snapshot's own anchor is all a restore checks, so the
    // forgery is believed and the job fits (on a copy: the real log is restarted below).
    let plain = w.s.0.join("plain.db");
    std::fs::copy(&db, &plain).unwrap();
    let server = Server::start_with_audit(&w.s, &plain, &[]);
    let d = ten_gpu_hours(&server);
    assert_eq!(d["decision"], "allow", "the forgery works without a witness: {d}\n{}", server.log_text());
    server.kill9();

    // With the witness: the signed head after the snapshot no longer chains back to its anchor, so
    // the state is replayed from the log and the job is denied.
    let server = Server::start(&w.s, &w.args());
    assert_eq!(project(&server), w.before);
    let d = ten_gpu_hours(&server);
    assert_eq!(d["decision"], "deny", "{d}");
    let h = healthz(&server);
    assert!(h.starts_with("ok\n"), "{h}");
    assert!(
        h.contains("note: restore: 1 engine snapshot was refused at start; the state was rebuilt from the whole log")
            && h.contains(&format!(
                "note: refused: the engine snapshot at event {} (anchors row {anchor}) is not covered by a signed head",
                w.snapshot_seq
            ))
            && h.contains(&format!("breaks at anchors row {}", anchor + 1)),
        "{h}"
    );
    let log = server.log_text();
    assert!(log.contains("an engine snapshot was refused") && log.contains("WARN"), "{log}");
}

#[test]
fn a_forged_snapshot_with_an_appended_matching_anchor_is_not_restored_with_a_witness() {
    let w = witnessed("trust-appended");
    let db = w.s.audit();
    let log = bursar_audit::AuditLog::open(&db, bursar_audit::Durability::Fast).unwrap();
    let conn = log.connection();
    let sum = forge_blob(conn, w.snapshot_seq);
    // A new snapshot anchor for the forged blob, after the last one, chained and made the head.
    let last = last_anchor(&db);
    let (taken_at, set): (i64, Option<String>) = conn
        .query_row("SELECT taken_at, policy_set FROM engine_snapshots WHERE event_seq = ?1", [w.snapshot_seq], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    conn
        .execute(
            "INSERT INTO anchors (seq, at, kind, events_seq, events_hash, decisions_seq, decisions_hash, loads_seq, loads_hash, subject, subject_seq, digest, note, hash)
             SELECT seq + 1, ?1, 'snapshot', events_seq, events_hash, decisions_seq, decisions_hash, loads_seq, loads_hash, ?2, ?3, ?4, NULL, X'00' FROM anchors WHERE seq = ?5",
            (taken_at, &set, w.snapshot_seq, &sum, last),
        )
        .unwrap();
    let hash = rehash_anchor(conn, last + 1);
    conn.execute("UPDATE chain_heads SET seq = ?1, hash = ?2 WHERE chain = 'anchors'", (last + 1, &hash)).unwrap();
    drop(log);

    // Without a witness the forgery restores (on a copy).
    let plain = w.s.0.join("plain.db");
    std::fs::copy(&db, &plain).unwrap();
    let server = Server::start_with_audit(&w.s, &plain, &[]);
    assert_eq!(ten_gpu_hours(&server)["decision"], "allow", "the forgery works without a witness");
    server.kill9();

    // With the witness, serve does not sign over the appended anchor: it does not start ...
    let err = Server::try_start(&w.s, &w.args()).err().unwrap_or_else(|| panic!("serve signed over the forgery"));
    assert!(
        err.contains(&format!("refusing to sign over anchors row {}", last + 1)) && err.contains("--adopt-unsigned"),
        "{err}"
    );
    // ... and told to adopt it, records the adoption and still does not restore the snapshot.
    let mut args = w.args();
    args.push("--adopt-unsigned");
    let server = Server::start(&w.s, &args);
    assert_eq!(project(&server), w.before);
    let d = ten_gpu_hours(&server);
    assert_eq!(d["decision"], "deny", "{d}");
    let h = healthz(&server);
    assert!(
        h.starts_with("ok\n")
            && h.contains("the state was rebuilt from the whole log")
            && h.contains(&format!(
                "note: refused: the engine snapshot at event {} (anchors row {}) was written unsigned and adopted unsigned (anchors row {})",
                w.snapshot_seq,
                last + 1,
                last + 2
            )),
        "{h}"
    );
    assert!(server.log_text().contains("adopting unsigned writes (--adopt-unsigned)"), "{}", server.log_text());
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    // The adoption is in the log for good, and everything after it is signed.
    let v = verify_witness(&db, &w.witness, &w.public, &[]);
    let out = text(&v);
    assert!(
        out.contains(&format!("anchors row {} was adopted unsigned at anchors row {}", last + 1, last + 2)),
        "{out}"
    );
}

/// The example events, split in two halves, and a policy directory for `eval`.
fn halves(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let pol = dir.join("eval-policies");
    std::fs::create_dir_all(&pol).unwrap();
    for e in std::fs::read_dir(repo.join("policies")).unwrap().flatten() {
        let p = e.path();
        let t = std::fs::read_to_string(&p).unwrap_or_default();
        if p.extension().is_some_and(|x| x == "toml") && !t.contains("component =") {
            std::fs::copy(&p, pol.join(e.file_name())).unwrap();
        }
    }
    let all = std::fs::read_to_string(repo.join("examples/events.jsonl")).unwrap();
    let lines: Vec<&str> = all.lines().collect();
    let (a, b) = lines.split_at(lines.len() / 2);
    let (first, second) = (dir.join("first.jsonl"), dir.join("second.jsonl"));
    std::fs::write(&first, a.join("\n")).unwrap();
    std::fs::write(&second, b.join("\n")).unwrap();
    (pol, first, second)
}

fn eval(pol: &Path, events: &Path, db: &Path, sign: Option<(&Path, &Path)>, extra: &[&str]) -> Output {
    let mut args = vec!["eval", "--policies", s(pol), "--events", s(events), "--audit", s(db)];
    if let Some((key, witness)) = sign {
        args.extend_from_slice(&["--signing-key", s(key), "--witness", s(witness)]);
    }
    args.extend_from_slice(extra);
    bursar(&args)
}

/// A signed log of the first half, then the second half appended without the key.
fn unsigned_tail(sc: &Scratch) -> (PathBuf, PathBuf, PathBuf, PathBuf, i64, i64) {
    let (key, public) = keygen(&sc.0);
    let (pol, first, second) = halves(&sc.0);
    let (db, witness) = (sc.0.join("a.db"), sc.0.join("witness.jsonl"));
    let out = eval(&pol, &first, &db, Some((&key, &witness)), &[]);
    assert!(out.status.success(), "{}", text(&out));
    let signed = last_anchor(&db);
    assert_eq!(newest_signed(&witness), signed);
    let out = eval(&pol, &second, &db, None, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let last = last_anchor(&db);
    assert!(last > signed);
    (db, witness, key, public, signed, last)
}

#[test]
fn writes_after_the_newest_signed_head_fail_verify_witness_unless_allowed() {
    let sc = Scratch::new("trust-tail");
    let (db, witness, _, public, signed, last) = unsigned_tail(&sc);
    // Without a witness the appended rows are as good as any.
    let v = bursar(&["audit", "--db", s(&db), "verify"]);
    assert!(v.status.success(), "{}", text(&v));

    let v = verify_witness(&db, &witness, &public, &[]);
    assert_eq!(v.status.code(), Some(1), "{}", text(&v));
    let err = String::from_utf8_lossy(&v.stderr);
    let n = last - signed;
    assert!(
        err.contains(&format!(
            "does not verify: {n} unsigned writes (anchors rows {} to {last}): the newest signed head covers anchors row {signed}",
            signed + 1
        )) && err.contains("help: ")
            && err.contains("--allow-unsigned-tail"),
        "{err}"
    );

    let v = verify_witness(&db, &witness, &public, &["--allow-unsigned-tail"]);
    let out = text(&v);
    assert_eq!(v.status.code(), Some(0), "{out}");
    assert!(
        out.contains(&format!("note: {n} unsigned writes (anchors rows {} to {last})", signed + 1))
            && out.contains("allowed with `--allow-unsigned-tail`")
            && out.contains("ok: "),
        "{out}"
    );
    // The flag is about the witness: without one it is a usage error.
    let v = bursar(&["audit", "--db", s(&db), "verify", "--allow-unsigned-tail"]);
    assert_eq!(v.status.code(), Some(2), "{}", text(&v));
}

#[test]
fn a_signing_eval_refuses_to_sign_over_unsigned_writes_until_told_to_adopt_them() {
    let sc = Scratch::new("trust-eval-adopt");
    let (db, witness, key, public, signed, last) = unsigned_tail(&sc);
    let (pol, first, _) = halves(&sc.0);
    let lines_before = std::fs::read_to_string(&witness).unwrap();

    // A signing run over the unsigned rows: refused, nothing written, nothing signed.
    let out = eval(&pol, &first, &db, Some((&key, &witness)), &[]);
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("refusing to sign over anchors rows {} to {last}", signed + 1))
            && err.contains("help: ")
            && err.contains("--adopt-unsigned"),
        "{err}"
    );
    assert_eq!(last_anchor(&db), last);
    assert_eq!(std::fs::read_to_string(&witness).unwrap(), lines_before);

    // Told to adopt them: the adoption is an anchor of its own, signed, and named by verify.
    let out = eval(&pol, &first, &db, Some((&key, &witness)), &["--adopt-unsigned"]);
    assert!(out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "audit: adopted unsigned writes with --adopt-unsigned (recorded in the log as anchors row {})",
            last + 1
        )),
        "{err}"
    );
    let v = verify_witness(&db, &witness, &public, &[]);
    let out = text(&v);
    assert_eq!(v.status.code(), Some(0), "{out}");
    assert!(
        out.contains(&format!(
            "anchors rows {} to {last} were adopted unsigned at anchors row {}",
            signed + 1,
            last + 1
        )),
        "{out}"
    );
    // From then on the log is on signed ground: the next signing run needs no flag.
    let out = eval(&pol, &first, &db, Some((&key, &witness)), &[]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn audit_head_does_not_launder_an_append_into_a_witness_that_vouches_for_the_log() {
    let sc = Scratch::new("trust-head-adopt");
    let (db, witness, key, public, signed, last) = unsigned_tail(&sc);
    let lines_before = std::fs::read_to_string(&witness).unwrap();
    // The routine signing run an operator might schedule: refused, nothing signed.
    let out = bursar(&["audit", "--db", s(&db), "head", "--signing-key", s(&key), "--witness", s(&witness)]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("anchors rows {} to {last} are not signed", signed + 1))
            && err.contains("help: ")
            && err.contains("--adopt-unsigned"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&witness).unwrap(), lines_before);
    assert_eq!(last_anchor(&db), last);
    // Told to: the adoption is recorded (an anchor of its own, signed) and verify names it.
    let out = bursar(&[
        "audit",
        "--db",
        s(&db),
        "head",
        "--signing-key",
        s(&key),
        "--witness",
        s(&witness),
        "--adopt-unsigned",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(newest_signed(&witness), last + 1);
    let v = verify_witness(&db, &witness, &public, &[]);
    let out = text(&v);
    assert_eq!(v.status.code(), Some(0), "{out}");
    assert!(out.contains(&format!("were adopted unsigned at anchors row {}", last + 1)), "{out}");
    // On signed ground again, the same run needs no flag; a new key's empty witness starts fresh.
    let out = bursar(&["audit", "--db", s(&db), "head", "--signing-key", s(&key), "--witness", s(&witness)]);
    assert!(out.status.success(), "{}", text(&out));
    std::fs::create_dir_all(sc.0.join("second")).unwrap();
    let (key2, _) = keygen(&sc.0.join("second"));
    let fresh = sc.0.join("witness-2.jsonl");
    let out = bursar(&["audit", "--db", s(&db), "head", "--signing-key", s(&key2), "--witness", s(&fresh)]);
    assert!(out.status.success(), "a new key's first signature: {}", text(&out));
}

#[test]
fn a_signing_serve_refuses_to_start_over_unsigned_writes_until_told_to_adopt_them() {
    let w = witnessed("trust-serve-adopt");
    // Written without the key by a serve that knew none: one more admission, unsigned.
    let server = Server::start(&w.s, &[]);
    assert_eq!(server.post("/v1/admit", &submit("e5", "j5", "nlp", 1, 1.0)).json().unwrap()["decision"], "allow");
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    let (signed, last) = (newest_signed(&w.witness), last_anchor(&w.s.audit()));
    assert!(last > signed);

    let err = Server::try_start(&w.s, &w.args()).err().unwrap_or_else(|| panic!("serve signed over unsigned writes"));
    assert!(
        err.contains(&format!("refusing to sign over anchors rows {} to {last}", signed + 1))
            && err.contains("--adopt-unsigned"),
        "{err}"
    );
    let mut args = w.args();
    args.push("--adopt-unsigned");
    let server = Server::start(&w.s, &args);
    // The snapshots among the adopted writes (the unsigned serve's shutdown snapshot) are not
    // restored; the usage is the log's all the same: 92 + 1 GPU-hours.
    let d = ten_gpu_hours(&server);
    assert_eq!(d["decision"], "deny", "{d}");
    assert!(healthz(&server).contains("was written unsigned and adopted unsigned"), "{}", healthz(&server));
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    let v = verify_witness(&w.s.audit(), &w.witness, &w.public, &[]);
    assert!(v.status.success(), "{}", text(&v));
    assert!(text(&v).contains("adopted unsigned at anchors row"), "{}", text(&v));
}
