//! Signed heads and the witness (issue 14, item 11): an attacker who can write the database can
//! delete the newest rows and rewrite every head, roll the file back to an older copy, or re-hash the
//! whole log, and the keyless chains still verify. With a witness each of these is caught; without
//! one, each still verifies (pinned here too, so the docs' "what it does not prove" stays true).

#![expect(clippy::unwrap_used, clippy::panic, reason = "test helpers: a failure is a test failure")]

use std::path::{Path, PathBuf};

use crate::common::{TempDir, entry, rehash, sql};
use bursar_audit::verify::{ProblemKind, Report, prune, verify, verify_with_witness};
use bursar_audit::{AuditLog, Durability, PublicKey, Record, SigningKey, SourceFile, Witness, Writer, WriterConfig};
use bursar_model::DecisionKind;

fn batch(from: u64, to: u64) -> Vec<Record> {
    (from..=to)
        .map(|i| {
            entry(
                i,
                if i % 2 == 0 { "nlp" } else { "cv" },
                "alice",
                (i as u32).div_ceil(2),
                DecisionKind::Allow,
                "quota/m",
                "set1",
            )
        })
        .collect()
}

/// A log written with a witness attached: a policy set, then commits of 10 entries (1..=40).
fn build(dir: &TempDir, name: &str) -> (PathBuf, PathBuf, PublicKey) {
    let db = dir.path(name);
    let wit = dir.path(&format!("{name}.witness"));
    let key = SigningKey::generate().unwrap();
    let public = key.public();
    let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
    log.set_witness(Witness::open(key, &wit).unwrap());
    log.record_policy_set("set1", &[SourceFile { path: "q.toml".into(), digest: "ab".into() }]).unwrap();
    for k in 0..4 {
        log.append(&batch(k * 10 + 1, k * 10 + 10)).unwrap();
    }
    assert_eq!(log.witness().unwrap().signed(), 5);
    (db, wit, public)
}

fn with_witness(db: &Path, wit: &Path, key: Option<&PublicKey>) -> Report {
    let lines = bursar_audit::witness::read(wit).unwrap();
    verify_with_witness(&AuditLog::open_read(db).unwrap(), &lines, key).unwrap()
}

fn plain(db: &Path) -> Report {
    verify(&AuditLog::open_read(db).unwrap()).unwrap()
}

fn witness_problem(rep: &Report) -> (ProblemKind, String) {
    let p = rep.problems.iter().find(|p| p.chain == "witness").unwrap_or_else(|| panic!("no witness problem: {rep:?}"));
    (p.kind.clone(), p.message.clone())
}

#[test]
fn every_write_is_signed_and_the_log_verifies_against_its_witness() {
    let dir = TempDir::new("w-ok");
    let (db, wit, key) = build(&dir, "a.db");
    let text = std::fs::read_to_string(&wit).unwrap();
    assert_eq!(text.lines().count(), 5);
    assert!(text.lines().all(|l| l.starts_with(r#"{"bursar_signed_head":1,"log":""#)), "{text}");
    let rep = with_witness(&db, &wit, Some(&key));
    assert!(rep.is_ok(), "{rep:?}");
    let w = rep.witness.unwrap();
    assert_eq!((w.lines, w.signed_anchor, w.unwitnessed_anchors), (5, 5, 0));
    assert_eq!(w.keys, vec![key.to_hex()]);
}

#[test]
fn truncation_with_every_head_rewritten_is_caught_only_by_the_witness() {
    let dir = TempDir::new("w-trunc");
    let (db, wit, key) = build(&dir, "a.db");
    // Cut everything back to the state after the second commit (anchor 3), heads included.
    sql(
        &db,
        "DELETE FROM events WHERE seq > 20; DELETE FROM decisions WHERE seq > 20; DELETE FROM anchors WHERE seq > 3; \
         UPDATE chain_heads SET seq = 20, hash = (SELECT hash FROM events WHERE seq = 20) WHERE chain = 'events'; \
         UPDATE chain_heads SET seq = 20, hash = (SELECT hash FROM decisions WHERE seq = 20) WHERE chain = 'decisions'; \
         UPDATE chain_heads SET seq = 3, hash = (SELECT hash FROM anchors WHERE seq = 3) WHERE chain = 'anchors'",
    );
    assert!(plain(&db).is_ok(), "{:?}", plain(&db));
    let rep = with_witness(&db, &wit, Some(&key));
    let (kind, msg) = witness_problem(&rep);
    assert_eq!(kind, ProblemKind::BehindWitness);
    assert!(msg.starts_with("the witness signed anchors row 4 on "), "{msg}");
    assert!(
        msg.ends_with("but the log ends at anchors row 3: it was truncated, or rolled back to an older copy"),
        "{msg}"
    );
}

#[test]
fn a_rollback_to_an_older_copy_is_caught_only_by_the_witness() {
    let dir = TempDir::new("w-roll");
    let (db, wit, key) = build(&dir, "a.db");
    let old = dir.path("old.db");
    bursar_audit::derived::copy_to(&db, &old).unwrap();
    // The log goes on, signed with a second key; then the old copy is put back in its place.
    let secret = write_key(&dir);
    let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
    log.set_witness(Witness::open(SigningKey::from_file(&secret).unwrap(), &wit).unwrap());
    log.append(&batch(41, 50)).unwrap();
    drop(log);
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    std::fs::rename(&old, &db).unwrap();
    assert!(plain(&db).is_ok());
    // Without a pinned key both signers' lines are accepted; the newest one is ahead of the copy.
    let (kind, msg) = witness_problem(&with_witness(&db, &wit, None));
    assert_eq!(kind, ProblemKind::BehindWitness, "{msg}");
    assert!(msg.contains("signed anchors row 6"), "{msg}");
    // Pinning the first key refuses the line signed with the second.
    let (kind, msg) = witness_problem(&with_witness(&db, &wit, Some(&key)));
    assert_eq!(kind, ProblemKind::BadWitness, "{msg}");
    assert!(msg.contains("not by the given public key"), "{msg}");
}

/// Writes a key pair `k.key` / `k.pub` in `dir`; returns the secret's path.
fn write_key(dir: &TempDir) -> PathBuf {
    let secret = dir.path("k.key");
    if !secret.exists() {
        SigningKey::generate().unwrap().write_pair(&secret, &dir.path("k.pub")).unwrap();
    }
    secret
}

#[test]
fn a_full_rehash_after_an_edit_is_caught_only_by_the_witness() {
    let dir = TempDir::new("w-rehash");
    let (db, wit, key) = build(&dir, "a.db");
    sql(&db, "UPDATE decisions SET decision = 'deny', reason = 'over quota' WHERE seq = 17");
    rehash(&db);
    assert!(plain(&db).is_ok(), "{:?}", plain(&db));
    let (kind, msg) = witness_problem(&with_witness(&db, &wit, Some(&key)));
    assert_eq!(kind, ProblemKind::DiffersFromWitness);
    // Anchor 3 (the commit that wrote decision 17) is the first that differs.
    assert!(msg.starts_with("anchors row 3 is not the one signed on "), "{msg}");
}

#[test]
fn an_edited_witness_line_is_refused() {
    let dir = TempDir::new("w-forge");
    let (db, wit, key) = build(&dir, "a.db");
    let text = std::fs::read_to_string(&wit).unwrap();
    let forged = text.replacen(r#""anchors":{"seq":2,"#, r#""anchors":{"seq":1,"#, 1);
    assert_ne!(forged, text);
    std::fs::write(&wit, forged).unwrap();
    let (kind, msg) = witness_problem(&with_witness(&db, &wit, Some(&key)));
    assert_eq!(kind, ProblemKind::BadWitness);
    assert!(msg.starts_with("witness line 2 cannot be trusted: its signature does not match its content"), "{msg}");
    // An empty witness proves nothing, and says so.
    std::fs::write(&wit, "").unwrap();
    assert!(witness_problem(&with_witness(&db, &wit, None)).1.starts_with("the witness holds no signed head"));
}

#[test]
fn a_prune_must_be_signed_to_pass_against_the_witness() {
    let dir = TempDir::new("w-prune");
    let before = bursar_model::Timestamp::parse("2026-11-06T00:00:00Z").unwrap().millis();
    // Unsigned prune: the checkpoint is newer than the last signed head.
    let (db, wit, key) = build(&dir, "a.db");
    let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
    prune(&mut log, before).unwrap();
    drop(log);
    assert!(plain(&db).is_ok());
    let (kind, msg) = witness_problem(&with_witness(&db, &wit, Some(&key)));
    assert_eq!(kind, ProblemKind::Unwitnessed);
    assert!(msg.contains("is newer than the last signed head (anchors row 5)"), "{msg}");
    // Signed prune (the witness attached to the pruning log): fine, and a witness line before the
    // prune still checks out against the anchors, which are never pruned.
    let (db, wit, key) = build(&dir, "b.db");
    let secret = write_key(&dir);
    let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
    log.set_witness(Witness::open(SigningKey::from_file(&secret).unwrap(), &wit).unwrap());
    prune(&mut log, before).unwrap();
    drop(log);
    let rep = with_witness(&db, &wit, None);
    assert!(rep.is_ok(), "{rep:?}");
    assert_eq!(rep.witness.unwrap().keys.len(), 2);
    // Pinned to the first key, the prune's line (second key) is refused.
    assert_eq!(witness_problem(&with_witness(&db, &wit, Some(&key))).0, ProblemKind::BadWitness);
}

#[test]
fn a_witness_that_signs_every_so_often_leaves_writes_pending_until_asked() {
    let dir = TempDir::new("w-every");
    let db = dir.path("a.db");
    let wit = dir.path("a.witness");
    let mut log = AuditLog::open(&db, Durability::Fast).unwrap();
    let w = Witness::open(SigningKey::generate().unwrap(), &wit).unwrap().every(std::time::Duration::from_secs(3600));
    log.set_witness(w);
    log.append(&batch(1, 5)).unwrap(); // the first write is signed at once
    log.append(&batch(6, 10)).unwrap(); // within the hour: pending
    assert_eq!(log.witness().unwrap().signed(), 1);
    let rep = with_witness(&db, &wit, None);
    assert!(rep.is_ok());
    assert_eq!(rep.witness.unwrap().unwitnessed_anchors, 1);
    let head = log.sign_pending().unwrap().unwrap();
    assert_eq!(head.anchors.seq, 2);
    assert_eq!(log.sign_pending().unwrap(), None, "nothing pending any more");
    assert_eq!(with_witness(&db, &wit, None).witness.unwrap().unwitnessed_anchors, 0);
}

#[test]
fn the_writer_thread_signs_through_the_log_it_was_given() {
    let dir = TempDir::new("w-writer");
    let db = dir.path("a.db");
    let wit = dir.path("a.witness");
    let mut log = AuditLog::open(&db, Durability::Durable).unwrap();
    let w = Witness::open(SigningKey::generate().unwrap(), &wit).unwrap().every(std::time::Duration::from_secs(3600));
    log.set_witness(w);
    let mut writer = Writer::spawn(
        log,
        WriterConfig { capacity: 4, max_group: 2, ..WriterConfig::default() },
        Box::new(|_, _| Ok(())),
    )
    .unwrap();
    for e in batch(1, 9) {
        writer.send_record(e).unwrap();
    }
    let stats = writer.finish().unwrap();
    assert!(stats.commits >= 5);
    // Signed at the first commit and, pending ones, when the writer finished: the last line covers all.
    let rep = with_witness(&db, &wit, None);
    assert!(rep.is_ok(), "{rep:?}");
    assert_eq!(rep.witness.unwrap().unwitnessed_anchors, 0);
}

#[test]
fn key_files_are_written_private_and_read_back() {
    let dir = TempDir::new("w-keys");
    let secret = dir.path("bursar.key");
    let public = dir.path("bursar.pub");
    let key = SigningKey::generate().unwrap();
    key.write_pair(&secret, &public).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777, 0o600);
    }
    assert_eq!(SigningKey::from_file(&secret).unwrap().public(), key.public());
    assert_eq!(PublicKey::from_file(&public).unwrap(), key.public());
    assert!(!format!("{key:?}").contains(&std::fs::read_to_string(&secret).unwrap()[26..40]));
    // Never overwritten.
    let e = key.write_pair(&secret, &dir.path("other.pub")).unwrap_err().to_string();
    assert!(e.contains("exists already"), "{e}");
    // A public key is not a signing key.
    let e = SigningKey::from_file(&public).unwrap_err().to_string();
    assert!(e.contains("is a `bursar-ed25519-public-key` file, not a `bursar-ed25519-secret-key` one"), "{e}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = SigningKey::from_file(&secret).unwrap_err().to_string();
        assert!(e.contains("may be read by others (mode 0644)") && e.contains("help: `chmod 600"), "{e}");
    }
}
