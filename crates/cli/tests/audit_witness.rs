//! Signed heads through the real `bursar` binary (issue 14, item 11): `audit keygen` writes a private
//! key, `eval --audit --signing-key --witness` signs every commit, `audit head` prints the signed head,
//! and `audit verify --witness` catches what plain `verify` cannot: a log truncated with every head
//! rewritten, a rollback to an older copy, an edited witness line, an unsigned prune.

#![expect(clippy::unwrap_used, reason = "test helpers: a failure is a test failure")]

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::serve_support::{Scratch, bursar, repo};
use bursar_audit::AuditLog;

/// The repository's TOML policies (WebAssembly ones left out, as in audit_eval.rs).
fn policies(dir: &Path) -> PathBuf {
    let out = dir.join("policies");
    std::fs::create_dir_all(&out).unwrap();
    for e in std::fs::read_dir(repo().join("policies")).unwrap().flatten() {
        let p = e.path();
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        if p.extension().is_some_and(|x| x == "toml") && !text.contains("component =") {
            std::fs::copy(&p, out.join(e.file_name())).unwrap();
        }
    }
    out
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Key pair, policies, and the example events split in two halves.
struct Setup {
    dir: Scratch,
    key: PathBuf,
    public: PathBuf,
    pol: PathBuf,
    first: PathBuf,
    second: PathBuf,
}

fn setup(tag: &str) -> Setup {
    let dir = Scratch::new(tag);
    let out = bursar(&["audit", "keygen", "--out", s(&dir.path("audit"))]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(text(&out).0.contains("public key "), "{:?}", text(&out));
    let pol = policies(&dir.0);
    let all = std::fs::read_to_string(repo().join("examples/events.jsonl")).unwrap();
    let lines: Vec<&str> = all.lines().collect();
    let (a, b) = lines.split_at(lines.len() / 2);
    let first = dir.path("first.jsonl");
    let second = dir.path("second.jsonl");
    std::fs::write(&first, a.join("\n")).unwrap();
    std::fs::write(&second, b.join("\n")).unwrap();
    Setup { key: dir.path("audit.key"), public: dir.path("audit.pub"), pol, first, second, dir }
}

fn eval_signed(st: &Setup, events: &Path, db: &Path, witness: &Path) {
    let out = bursar(&[
        "eval",
        "--policies",
        s(&st.pol),
        "--events",
        s(events),
        "--audit",
        s(db),
        "--signing-key",
        s(&st.key),
        "--witness",
        s(witness),
    ]);
    assert!(out.status.success(), "{:?}", text(&out));
    assert!(text(&out).1.contains(&format!("audit: signed heads appended to witness `{}`", witness.display())));
}

fn verify(db: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let mut args = vec!["audit", "--db", s(db), "verify"];
    args.extend_from_slice(extra);
    let out = bursar(&args);
    let (o, e) = text(&out);
    (out.status.code(), o, e)
}

#[test]
fn keygen_writes_a_private_key_and_refuses_to_overwrite_it() {
    let st = setup("keygen");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&st.key).unwrap().permissions().mode() & 0o777, 0o600);
    }
    assert!(std::fs::read_to_string(&st.public).unwrap().starts_with("bursar-ed25519-public-key "));
    let again = bursar(&["audit", "keygen", "--out", s(&st.dir.path("audit"))]);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again).1.contains("exists already"), "{:?}", text(&again));
    // --signing-key needs --witness (and --audit): a usage error, nothing evaluated.
    let out = bursar(&["eval", "--policies", s(&st.pol), "--events", s(&st.first), "--signing-key", s(&st.key)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

#[test]
fn a_signed_eval_verifies_and_head_prints_the_signed_head() {
    let st = setup("ok");
    let db = st.dir.path("a.db");
    let wit = st.dir.path("witness.jsonl");
    eval_signed(&st, &st.first, &db, &wit);
    eval_signed(&st, &st.second, &db, &wit);
    let lines = std::fs::read_to_string(&wit).unwrap();
    // Each run: the policy set (the second run's is already known: a plain load) and its commits.
    assert!(lines.lines().count() >= 4, "{lines}");
    let (code, out, err) = verify(&db, &["--witness", s(&wit), "--public-key", s(&st.public)]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("signed heads (key ") && out.contains("0 write(s) after it"), "{out}");
    assert!(out.ends_with(&format!("ok: `{}` verifies\n", db.display())), "{out}");

    // `audit head` signs the current head (stdout: the line only) ...
    let head = bursar(&["audit", "--db", s(&db), "head", "--signing-key", s(&st.key)]);
    let (o, e) = text(&head);
    assert!(head.status.success(), "{e}");
    let v: serde_json::Value = serde_json::from_str(o.trim()).unwrap();
    assert_eq!(v["bursar_signed_head"], 1);
    let (anchor, _) = AuditLog::open_read(&db).unwrap().head();
    assert_eq!(v["anchors"]["seq"], anchor);
    assert!(e.starts_with(&format!("signed head of `{}`: anchors row {anchor}", db.display())), "{e}");
    // ... and with --witness alone shows the newest signed one, after checking it.
    let newest = bursar(&["audit", "--db", s(&db), "head", "--witness", s(&wit)]);
    assert!(newest.status.success(), "{:?}", text(&newest));
    assert_eq!(text(&newest).0.trim(), lines.lines().last().unwrap());
}

#[test]
fn truncation_with_rewritten_heads_and_a_rollback_fail_only_with_the_witness() {
    let st = setup("attack");
    let db = st.dir.path("a.db");
    let wit = st.dir.path("witness.jsonl");
    eval_signed(&st, &st.first, &db, &wit);
    let old = st.dir.path("old.db");
    std::fs::copy(&db, &old).unwrap();
    eval_signed(&st, &st.second, &db, &wit);

    // Truncation: the second run's rows cut off, every head rewritten to match.
    let cut = st.dir.path("cut.db");
    std::fs::copy(&db, &cut).unwrap();
    let keep = AuditLog::open_read(&old).unwrap();
    let (ev, de, an) = (keep.last_event_seq(), keep.last_decision_seq(), keep.head().0);
    drop(keep);
    let sql = format!(
        "DELETE FROM events WHERE seq > {ev}; DELETE FROM decisions WHERE seq > {de}; DELETE FROM anchors WHERE seq > {an};
         UPDATE chain_heads SET seq = {ev}, hash = (SELECT hash FROM events WHERE seq = {ev}) WHERE chain = 'events';
         UPDATE chain_heads SET seq = {de}, hash = (SELECT hash FROM decisions WHERE seq = {de}) WHERE chain = 'decisions';
         UPDATE chain_heads SET seq = {an}, hash = (SELECT hash FROM anchors WHERE seq = {an}) WHERE chain = 'anchors';
         DELETE FROM policy_loads WHERE seq > 1;
         UPDATE chain_heads SET seq = 1, hash = (SELECT hash FROM policy_loads WHERE seq = 1) WHERE chain = 'policy_loads';"
    );
    AuditLog::open(&cut, bursar_audit::Durability::Fast).unwrap().connection().execute_batch(&sql).unwrap();
    let (code, out, err) = verify(&cut, &[]);
    assert_eq!(code, Some(0), "without a witness the cut log verifies: {out}{err}");
    let (code, out, err) = verify(&cut, &["--witness", s(&wit), "--public-key", s(&st.public)]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        err.contains("but the log ends at anchors row") && err.contains("it was truncated, or rolled back"),
        "{err}"
    );

    // Rollback: the copy taken after the first run put back in place.
    let (code, _, _) = verify(&old, &[]);
    assert_eq!(code, Some(0));
    let (code, _, err) = verify(&old, &["--witness", s(&wit)]);
    assert_eq!(code, Some(1));
    assert!(err.contains("rolled back to an older copy"), "{err}");

    // An edited witness line is refused, whatever the log says.
    let forged = std::fs::read_to_string(&wit).unwrap().replacen(r#""at":"#, r#""at":1"#, 1);
    let fw = st.dir.path("forged.jsonl");
    std::fs::write(&fw, forged).unwrap();
    let (code, _, err) = verify(&db, &["--witness", s(&fw)]);
    assert_eq!(code, Some(1));
    assert!(err.contains("witness line 1 cannot be trusted: its signature does not match its content"), "{err}");
}

#[test]
fn a_prune_of_a_witnessed_log_must_be_signed() {
    let st = setup("prune");
    let db = st.dir.path("a.db");
    let wit = st.dir.path("witness.jsonl");
    eval_signed(&st, &st.first, &db, &wit);
    let unsigned = st.dir.path("unsigned.db");
    std::fs::copy(&db, &unsigned).unwrap();
    let p = bursar(&["audit", "--db", s(&unsigned), "prune", "--before", "2026-11-02T12:00:00Z"]);
    assert!(p.status.success(), "{:?}", text(&p));
    let (code, _, err) = verify(&unsigned, &["--witness", s(&wit)]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("an unsigned prune could hide removed rows") && err.contains("help: prune with `--signing-key`"),
        "{err}"
    );

    let p = bursar(&[
        "audit",
        "--db",
        s(&db),
        "prune",
        "--before",
        "2026-11-02T12:00:00Z",
        "--signing-key",
        s(&st.key),
        "--witness",
        s(&wit),
    ]);
    assert!(p.status.success(), "{:?}", text(&p));
    assert!(text(&p).0.contains("checkpoints recorded and signed"), "{:?}", text(&p));
    let (code, out, err) = verify(&db, &["--witness", s(&wit), "--public-key", s(&st.public)]);
    assert_eq!(code, Some(0), "{out}{err}");
}
