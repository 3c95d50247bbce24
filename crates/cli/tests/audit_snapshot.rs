//! Regression test for issue 14, item 9, through the real `bursar serve`: editing the newest engine
//! snapshot (every ledger's reserved GPU-hours and held GPUs set to 0) used to reset the quota after a
//! restart, and `verify` still passed. Now the restarted server refuses the snapshot (loudly, in its
//! log), replays the log instead and reports the same usage as before; `verify` names the snapshot.

mod serve_support;

use serde_json::Value;
use serve_support::*;

fn project(server: &Server) -> Value {
    let mut p = server.get_json("/v1/projects/nlp");
    if let Some(o) = p.as_object_mut() {
        o.remove("engine_time");
    }
    p
}

/// Sets every number under a key named `reserved` or `held_gpus` to 0.
fn zero(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if (k == "reserved" || k == "held_gpus") && x.is_number() {
                    *x = Value::from(0);
                } else {
                    zero(x);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(zero),
        _ => {}
    }
}

#[test]
fn an_edited_snapshot_is_refused_on_restart_and_the_usage_is_replayed() {
    let s = Scratch::new("audit-snapshot");
    let server = Server::start(&s, &["--snapshot-every", "1h"]);
    for i in 1..=4 {
        let d = server.post("/v1/admit", &submit(&format!("e{i}"), &format!("j{i}"), "nlp", 2, 3.0)).json().unwrap();
        assert_eq!(d["decision"], "allow", "{d}");
    }
    assert_eq!(server.post("/v1/snapshot", "").status, 200);
    let before = project(&server);
    server.kill9();
    let verify = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_bursar"))
            .args(["audit", "--db"])
            .arg(s.audit())
            .arg("verify")
            .output()
            .unwrap()
    };
    // What serve wrote passes every check, the cross-chain ones included.
    let v = verify();
    assert!(v.status.success(), "{}{}", String::from_utf8_lossy(&v.stdout), String::from_utf8_lossy(&v.stderr));

    // The attacker edits the newest snapshot.
    let log = bursar_audit::AuditLog::open(s.audit(), bursar_audit::Durability::Fast).unwrap();
    let (seq, blob): (i64, Vec<u8>) = log
        .connection()
        .query_row("SELECT event_seq, blob FROM engine_snapshots ORDER BY event_seq DESC LIMIT 1", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    let mut snap: Value = serde_json::from_slice(&blob).unwrap();
    let original = snap.clone();
    zero(&mut snap);
    assert_ne!(snap, original, "the snapshot holds reserved hours to zero");
    let edited = serde_json::to_vec(&snap).unwrap();
    log.connection().execute("UPDATE engine_snapshots SET blob = ?1 WHERE event_seq = ?2", (&edited, seq)).unwrap();
    drop(log);

    let v = verify();
    assert_eq!(v.status.code(), Some(1));
    let err = String::from_utf8_lossy(&v.stderr);
    assert!(err.contains(&format!("the engine snapshot at event {seq} does not match its anchor")), "{err}");

    let server = Server::start(&s, &[]);
    // Replayed from the log: the same usage as before the crash, not the edited one ...
    assert_eq!(project(&server), before);
    // ... and said so in the server's log.
    let text = server.log_text();
    assert!(text.contains("an engine snapshot was refused"), "{text}");
    let (status, _) = server.terminate();
    assert!(status.success());
}
